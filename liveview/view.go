package liveview

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// View is one picture of a run or a node, as the page receives it (JSON).
type View struct {
	// Title names what is shown ("jacobi on 3 nodes", "node n1").
	Title string `json:"title"`
	// Source says who serves the view ("acpp-submit, cluster run").
	Source string `json:"source"`
	// Time is when the view was taken (set by the server).
	Time time.Time `json:"time"`
	// Notes are lines the page shows as they are (what the view cannot
	// know, such as page validity on a node).
	Notes   []string `json:"notes,omitempty"`
	Members []Member `json:"members"`
	Jobs    []Job    `json:"jobs"`
	Buffers []Buffer `json:"buffers"`
	// Links are the bytes moved per link; the server fills Rate from the
	// Bytes of successive views.
	Links []Link `json:"links"`
}

// Member is a cluster member (or the machine of an embedded run).
type Member struct {
	Name string `json:"name"`
	Addr string `json:"addr,omitempty"`
	// Health is "alive", "suspect", "dead", "left", "draining", "lost"
	// (lost by the job) or "busy" (instructions pending).
	Health  string   `json:"health"`
	Devices []string `json:"devices,omitempty"`
	Memory  []Memory `json:"memory,omitempty"`
	// Pending is the number of instructions not yet finished there.
	Pending int `json:"pending,omitempty"`
}

// Memory is one memory of a member: what is in use against its budget.
type Memory struct {
	Name string `json:"name"`
	// Used, Budget and Size are bytes; 0 means unknown (or no budget).
	Used   uint64 `json:"used"`
	Budget uint64 `json:"budget,omitempty"`
	Size   uint64 `json:"size,omitempty"`
}

// Job is a job with its progress.
type Job struct {
	Name string `json:"name"`
	// Done and Planned count command groups, or what Unit names
	// (Planned 0: unknown).
	Done    int    `json:"done"`
	Planned int    `json:"planned"`
	Unit    string `json:"unit,omitempty"` // empty: "groups"
	// State is "running", "done" or "failed".
	State string `json:"state"`
	// Detail is one line more (a node's instruction counts, allocations).
	Detail string `json:"detail,omitempty"`
	// Frontier is the frontier of the job's DAG in flight: the groups
	// issued and not finished (a cluster's coordinator issues ahead) or
	// running, counted per device and name ("n1/cpu:0: jacobi2d ×2").
	Frontier []string `json:"frontier,omitempty"`
}

// Buffer is one buffer's page grid per allocation.
type Buffer struct {
	Name string `json:"name"`
	// Pages is the page grid's size per dimension.
	Pages [3]int `json:"pages"`
	// Cols and Rows are the shape of each allocation's cells (Cols*Rows
	// cells, at most MaxCells).
	Cols   int     `json:"cols"`
	Rows   int     `json:"rows"`
	Allocs []Alloc `json:"allocs"`
}

// Alloc is one allocation of a buffer (a node's memory, the client, a
// device's memory).
type Alloc struct {
	Name string `json:"name"`
	// ValidPages counts the pages up to date here.
	ValidPages int `json:"valid"`
	// Valid and Moving hold one hex digit per cell, row by row: the share
	// of the cell's pages up to date here, and being transferred here,
	// from '0' (none) to 'f' (all); any share above none shows as at
	// least '1', and only all as 'f'. Moving is empty when nothing moves.
	Valid  string `json:"cells"`
	Moving string `json:"moving,omitempty"`
}

// Link is the data moved from one memory or node to another.
type Link struct {
	From  string `json:"from"`
	To    string `json:"to"`
	Bytes int64  `json:"bytes"`
	// Rate is bytes per second over the last second or so.
	Rate float64 `json:"rate"`
}

// Frontier counts running groups given as "device: name", one entry per
// distinct one, sorted: "device: name ×N" for N > 1.
func Frontier(running []string) []string {
	if len(running) == 0 {
		return nil
	}
	n := map[string]int{}
	for _, r := range running {
		n[r]++
	}
	out := make([]string, 0, len(n))
	for _, k := range slices.Sorted(maps.Keys(n)) {
		if n[k] > 1 {
			k = fmt.Sprintf("%s ×%d", k, n[k])
		}
		out = append(out, k)
	}
	return out
}
