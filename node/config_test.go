package node

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/device/devicetest"
)

func TestConfigValidateNamesEveryBadField(t *testing.T) {
	cfg := Config{
		Name:          "bad name!",
		GossipAddr:    "no-port",
		Join:          []string{"nowhere"},
		Devices:       "gpu",
		CPUWorkers:    -1,
		JobLease:      -1,
		MaxBytes:      10,
		MaxJobBytes:   20,
		FeedLimit:     -1,
		MaxJobInstrs:  -1,
		MaxClientJobs: -1,
	}
	err := cfg.Validate()
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Validate = %v, want ErrInvalidConfig", err)
	}
	for _, field := range []string{"Name", "CredentialsDir", "GossipAddr", "Join", "Devices", "CPUWorkers", "JobLease", "MaxJobBytes", "FeedLimit", "MaxJobInstrs", "MaxClientJobs"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("Validate error does not name %s:\n%v", field, err)
		}
	}
	ok := DefaultLocalConfig()
	ok.Name, ok.CredentialsDir = "n1", "/etc/acpp"
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate(local preset) = %v", err)
	}
}

// TestDeviceFilter: --devices exposes the devices listed; an entry that
// matches no device is refused at start (it used to be dropped silently
// while another entry matched).
func TestDeviceFilter(t *testing.T) {
	// On a GPU machine the CUDA backend exposes its devices too.
	var gpus []string
	if d, err := openDevices(context.Background(), Config{Devices: "cuda", CPUWorkers: 1}); err == nil {
		for _, dev := range d.list {
			gpus = append(gpus, dev.Info().ID.String())
		}
		d.close()
	}
	all := append(append([]string{"cpu:0"}, gpus...), "fake:0", "fake:1")
	cuda, cudaErr := gpus, ""
	if len(gpus) == 0 {
		cudaErr = "cuda matches no device of this machine"
	}
	tests := []struct {
		filter  string
		want    []string // exposed devices
		wantErr string
	}{
		{"", all, ""},
		{"all", all, ""},
		{"cpu", []string{"cpu:0"}, ""},
		{"fake:1", []string{"fake:1"}, ""},
		{"cpu, fake:0", []string{"cpu:0", "fake:0"}, ""},
		{"cuda", cuda, cudaErr},
		{"gpu", nil, "unknown device kind"},
		{"fake:x", nil, "must be a number"},
		{"cpu, fake:0,", []string{"cpu:0", "fake:0"}, ""},
		// An entry that matches nothing is refused, naming it and the
		// devices there are, even when other entries match.
		{"cpu,cuda:99", nil, "cuda:99 matches no device of this machine (it has cpu:0"},
		{"cpu,fake:5,fake:6", nil, "fake:5, fake:6 match no device of this machine (it has cpu:0, "},
	}
	for _, tt := range tests {
		t.Run(tt.filter, func(t *testing.T) {
			extra := []device.Device{
				devicetest.NewFake(devicetest.FakeConfig{Index: 0}),
				devicetest.NewFake(devicetest.FakeConfig{Index: 1, HostUnified: true}),
			}
			d, err := openDevices(context.Background(), Config{Devices: tt.filter, CPUWorkers: 1, ExtraDevices: extra})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("openDevices(%q) = %v, want an error saying %q", tt.filter, err, tt.wantErr)
				}
				if err == nil {
					d.close()
				} else {
					for _, e := range extra {
						e.Close()
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer d.close()
			var got []string
			for _, dev := range d.list {
				got = append(got, dev.Info().ID.String())
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("openDevices(%q) exposes %v, want %v", tt.filter, got, tt.want)
			}
			// Host memory always exists; non-unified devices get their own.
			if !d.mems[0].host {
				t.Errorf("memory 0 is not host memory")
			}
			for _, dev := range d.list {
				id := dev.Info().ID.String()
				if dev.Info().Caps.HostUnified != (d.memOf[id] == 0) {
					t.Errorf("%s (unified %v) uses memory %d", id, dev.Info().Caps.HostUnified, d.memOf[id])
				}
			}
		})
	}
}
