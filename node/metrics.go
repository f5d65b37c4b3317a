package node

import (
	"math"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/acpp/acpp/cluster"
	"github.com/acpp/acpp/device"
)

// metrics are the node's Prometheus metrics, in a registry of its own
// (several nodes can run in one test process).
type metrics struct {
	reg        *prometheus.Registry
	bytes      *prometheus.CounterVec
	boxes      *prometheus.CounterVec
	transfers  *prometheus.CounterVec
	byRef      *prometheus.CounterVec
	instrs     *prometheus.CounterVec
	pending    prometheus.Gauge
	allocs     prometheus.Gauge
	allocBytes prometheus.Gauge
	jobs       prometheus.Gauge
	members    prometheus.Gauge
	recoveries prometheus.Counter
	replayed   prometheus.Counter
	drains     prometheus.Counter
	handedOver prometheus.Counter
}

// newMetrics makes the node's metrics; cl gives its membership (nil while
// it starts), read when /metrics is scraped.
func newMetrics(cl func() *cluster.Cluster) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "acpp_node_page_bytes_total", Help: "Page payload bytes moved, by direction (sent, received) and peer (node name, or client).",
		}, []string{"direction", "peer"}),
		boxes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "acpp_node_page_boxes_total", Help: "Page boxes moved, by direction and peer.",
		}, []string{"direction", "peer"}),
		transfers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "acpp_node_page_transfers_total", Help: "Completed page transfers, by direction and peer.",
		}, []string{"direction", "peer"}),
		byRef: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "acpp_node_page_transfers_by_reference_total", Help: "Completed page transfers between GPUs of one host that went device to device (CUDA IPC) instead of through the network, by direction and peer; also counted in acpp_node_page_transfers_total.",
		}, []string{"direction", "peer"}),
		instrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "acpp_node_instructions_total", Help: "Finished instructions, by kind and outcome (ok, failed, dep_failed, node_lost, memory_limit, job_closed, transfer_failed).",
		}, []string{"kind", "outcome"}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "acpp_node_queue_depth", Help: "Instructions submitted and not yet finished, over all jobs.",
		}),
		allocs: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "acpp_node_allocations", Help: "Buffer allocations held by jobs.",
		}),
		allocBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "acpp_node_allocated_bytes", Help: "Bytes held by jobs: allocations and page staging.",
		}),
		jobs: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "acpp_node_jobs", Help: "Open jobs.",
		}),
		members: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "acpp_node_cluster_members", Help: "Alive cluster members as this node sees them.",
		}),
		recoveries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "acpp_node_job_recoveries_total", Help: "Jobs opened again here by a client that lost another node and recovers (restores its checkpoint and replays on the nodes left).",
		}),
		replayed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "acpp_node_replayed_launches_total", Help: "Kernel launches submitted here by a recovering client: command groups run again because their first run was lost with another node.",
		}),
		drains: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "acpp_node_drains_total", Help: "Drains of this node (SIGTERM): it advertised that it leaves and let its jobs' clients hand its pages over.",
		}),
		handedOver: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "acpp_node_drain_jobs_released_total", Help: "Jobs whose client closed them here during a drain, after moving the pages only this node held (nothing re-run).",
		}),
	}
	m.reg.MustRegister(m.bytes, m.boxes, m.transfers, m.byRef, m.instrs, m.pending, m.allocs, m.allocBytes, m.jobs, m.members,
		m.recoveries, m.replayed, m.drains, m.handedOver, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.addCluster(cl)
	return m
}

// addCluster exports the membership's counters (cluster.Stats), read when
// /metrics is scraped; zero while the node starts.
func (m *metrics) addCluster(cl func() *cluster.Cluster) {
	stats := func() cluster.Stats {
		if c := cl(); c != nil {
			return c.Stats()
		}
		return cluster.Stats{}
	}
	for _, st := range []struct {
		state string
		get   func(cluster.Stats) int
	}{
		{"alive", func(s cluster.Stats) int { return s.Alive }},
		{"left", func(s cluster.Stats) int { return s.Left }},
		{"failed", func(s cluster.Stats) int { return s.Failed }},
	} {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "acpp_node_cluster_members_by_state", ConstLabels: prometheus.Labels{"state": st.state},
			Help: "Cluster members as this node sees them, by state (alive, left, failed); departed members are kept up to 256.",
		}, func() float64 { return float64(st.get(stats())) }))
	}
	m.reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "acpp_node_cluster_events_total", Help: "Membership events (join, update, leave, fail) this node has seen.",
		}, func() float64 { return float64(stats().Events) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "acpp_node_cluster_resyncs_total", Help: "Membership subscriptions that fell behind and were resynchronised with a snapshot: some reader does not keep up.",
		}, func() float64 { return float64(stats().Resyncs) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "acpp_node_cluster_health_score", Help: "memberlist's health score of this node: 0 is healthy; higher means it misses its own probe deadlines (usually CPU starvation) and has slowed its probing.",
		}, func() float64 { return float64(stats().HealthScore) }),
	)
}

// addHandlerPanics exports how many panics of message handlers the
// transport recovered, read at each scrape.
func (m *metrics) addHandlerPanics(count func() int64) {
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "acpp_node_handler_panics_total",
		Help: "Panics of message and page handlers the transport recovered (each a bug; the log has its stack). /healthz answers 503 degraded after one: restart the node.",
	}, func() float64 { return float64(count()) }))
}

// addDevicesLost exports how many of the node's devices are lost (a GPU
// whose context a faulting kernel made unusable), read at each scrape.
func (m *metrics) addDevicesLost(count func() int) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "acpp_node_devices_lost",
		Help: "Devices of this node lost while it runs (a GPU whose CUDA context a job's faulting kernel made unusable): they run nothing more until acpp-node restarts; /healthz says which.",
	}, func() float64 { return float64(count()) }))
}

// addCertificate exports the seconds until the node's certificate expires
// (negative once expired), read when /metrics is scraped.
func (m *metrics) addCertificate(notAfter time.Time) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "acpp_node_certificate_expiry_seconds",
		Help: "Seconds until this node's certificate (nodes/<name>.crt) expires; negative once it has. Re-issue it and restart the node before then (docs/OPERATIONS.md, \"Renewing certificates\").",
	}, func() float64 { return time.Until(notAfter).Seconds() }))
}

// Metrics is the node's metrics registry (what /metrics serves).
func (n *Node) Metrics() prometheus.Gatherer { return n.met.reg }

// addMemory exports a memory's budget and use as gauges labelled with the
// memory's ID and its device, read when /metrics is scraped. A memory
// without a budget reports +Inf.
func (m *metrics) addMemory(mem *memory) {
	labels := prometheus.Labels{"memory": strconv.FormatUint(uint64(mem.id), 10), "device": mem.dev.Info().ID.String()}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "acpp_node_memory_budget_bytes", ConstLabels: labels,
			Help: "Bytes jobs may allocate together in a memory (host memory or a GPU's), staging included; +Inf without a budget (acpp-node --max-bytes).",
		}, func() float64 {
			if b := mem.budget.Limit(); b > 0 {
				return float64(b)
			}
			return math.Inf(1)
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "acpp_node_memory_used_bytes", ConstLabels: labels,
			Help: "Bytes jobs hold in a memory (allocations and page staging), counted against its budget.",
		}, func() float64 { return float64(mem.budget.Used()) }),
	)
}

// budgetStr is a budget for logs: its size, or "none".
func budgetStr(b *device.Budget) string {
	if b.Limit() == 0 {
		return "none"
	}
	return device.FormatBytes(b.Limit())
}
