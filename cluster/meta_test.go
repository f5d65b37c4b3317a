package cluster_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/acpp/acpp/cluster"
	"pgregory.net/rapid"
)

var rewrite = flag.Bool("rewrite", false, "rewrite golden files in testdata/")

func sampleMeta() cluster.Meta {
	return cluster.Meta{
		NodeID:          "gpu-07",
		BootID:          0x0123456789abcdef,
		QUICAddr:        "10.0.0.7:7950",
		ProtocolVersion: 1,
		Devices: []cluster.DeviceSummary{
			{Kind: cluster.DeviceCPU, Count: 1, MemBytes: 512 << 30, Unified: true},
			{Kind: cluster.DeviceCUDA, Count: 8, MemBytes: 8 * 141 << 30},
		},
	}
}

// TestMetaRoundTrip_C1: every valid Meta decodes to itself.
func TestMetaRoundTrip_C1(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    cluster.Meta
	}{
		{"minimal", cluster.Meta{NodeID: "n"}},
		{"sample", sampleMeta()},
		{"leaving", func() cluster.Meta { m := sampleMeta(); m.Leaving = true; return m }()},
		{"ipv6", cluster.Meta{NodeID: "v6", QUICAddr: "[::1]:7950", ProtocolVersion: 65535}},
		{"extremes", cluster.Meta{NodeID: strings.Repeat("n", cluster.MaxNameLen), BootID: ^uint64(0),
			Devices: []cluster.DeviceSummary{{Kind: 255, Count: ^uint32(0), MemBytes: ^uint64(0), Unified: true}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.m.Encode()
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			got, err := cluster.DecodeMeta(b)
			if err != nil {
				t.Fatalf("DecodeMeta: %v", err)
			}
			if !reflect.DeepEqual(got, tc.m) {
				t.Errorf("DecodeMeta(Encode(m)) = %+v, want %+v", got, tc.m)
			}
		})
	}
}

// TestMetaGolden_C1 pins the wire layout: a change to the encoding of
// version 1 breaks mixed-version clusters, so it must show up in review.
// go test ./cluster -run Golden -rewrite regenerates the file.
func TestMetaGolden_C1(t *testing.T) {
	b, err := sampleMeta().Encode()
	if err != nil {
		t.Fatal(err)
	}
	got := hex.Dump(b)
	path := filepath.Join("testdata", "meta_v1.golden")
	if *rewrite {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -rewrite to create it)", err)
	}
	if got != string(want) {
		t.Errorf("encoding changed:\n got:\n%s\nwant:\n%s", got, want)
	}
}

// TestDecodeMetaRejects_C1: malformed, truncated, oversized and
// unknown-version input is an error that says what is wrong.
func TestDecodeMetaRejects_C1(t *testing.T) {
	valid, _ := sampleMeta().Encode()
	with := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(valid)) }
	for _, tc := range []struct {
		name string
		in   []byte
		want error
		msg  string
	}{
		{"empty", nil, cluster.ErrBadMeta, "empty"},
		{"oversized", make([]byte, cluster.MetaMaxSize+1), cluster.ErrBadMeta, "at most 512"},
		{"unknown version", with(func(b []byte) []byte { b[0] = 9; return b }), cluster.ErrMetaVersion, "version 9"},
		{"version zero", with(func(b []byte) []byte { b[0] = 0; return b }), cluster.ErrMetaVersion, "version 0"},
		{"unknown node flag", with(func(b []byte) []byte { b[1] = 0x80; return b }), cluster.ErrBadMeta, "node flag"},
		{"truncated header", valid[:1], cluster.ErrBadMeta, "truncated"},
		{"truncated name", valid[:5], cluster.ErrBadMeta, "truncated"},
		{"truncated devices", valid[:len(valid)-1], cluster.ErrBadMeta, "truncated"},
		{"trailing byte", append(bytes.Clone(valid), 0), cluster.ErrBadMeta, "left over"},
		{"non-minimal varint", []byte{1, 0, 0x80, 0x00, 1, 'n', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, cluster.ErrBadMeta, "minimally"},
		{"empty node id", []byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, cluster.ErrBadMeta, "node id"},
		{"control char in id", []byte{1, 0, 0, 1, '\n', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, cluster.ErrBadMeta, "control"},
		{"name too long", append([]byte{1, 0, 0, 0xff, 0x01}, make([]byte, 300)...), cluster.ErrBadMeta, "exceeds 128"},
		{"bad quic addr", []byte{1, 0, 0, 1, 'n', 0, 0, 0, 0, 0, 0, 0, 0, 3, 'a', 'b', 'c', 0}, cluster.ErrBadMeta, "QUIC address"},
		{"too many kinds", []byte{1, 0, 0, 1, 'n', 0, 0, 0, 0, 0, 0, 0, 0, 0, 17}, cluster.ErrBadMeta, "device kind count"},
		{"unknown device flag", []byte{1, 0, 0, 1, 'n', 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 2, 1, 0}, cluster.ErrBadMeta, "flag bits"},
		{"zero count", []byte{1, 0, 0, 1, 'n', 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0}, cluster.ErrBadMeta, "count 0"},
		{"kind zero", []byte{1, 0, 0, 1, 'n', 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0}, cluster.ErrBadMeta, "kind 0"},
		{"kinds unsorted", []byte{1, 0, 0, 1, 'n', 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 0, 1, 0, 1, 0, 1, 0}, cluster.ErrBadMeta, "sorted"},
		{"count overflows uint32", []byte{1, 0, 0, 1, 'n', 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0x80, 0x80, 0x80, 0x80, 0x10, 0}, cluster.ErrBadMeta, "exceeds"},
		{"varint overflow", []byte{1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, cluster.ErrBadMeta, "overflows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := cluster.DecodeMeta(tc.in)
			if !errors.Is(err, tc.want) {
				t.Fatalf("DecodeMeta(%x) = %+v, %v; want error matching %v", tc.in, m, err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("DecodeMeta(%x) error %q does not say %q", tc.in, err, tc.msg)
			}
		})
	}
}

// TestEncodeMetaRefuses_C1: Encode checks the same rules as the decoder,
// and the 512-byte limit.
func TestEncodeMetaRefuses_C1(t *testing.T) {
	many := make([]cluster.DeviceSummary, cluster.MaxDeviceKinds)
	for i := range many {
		many[i] = cluster.DeviceSummary{Kind: cluster.DeviceKind(i + 1), Count: 1 << 31, MemBytes: 1 << 63}
	}
	for _, tc := range []struct {
		name string
		m    cluster.Meta
		want error
	}{
		{"no node id", cluster.Meta{}, cluster.ErrBadMeta},
		{"bad quic addr", cluster.Meta{NodeID: "n", QUICAddr: "nohost"}, cluster.ErrBadMeta},
		{"duplicate kind", cluster.Meta{NodeID: "n", Devices: []cluster.DeviceSummary{{Kind: 1, Count: 1}, {Kind: 1, Count: 1}}}, cluster.ErrBadMeta},
		{"too many kinds", cluster.Meta{NodeID: "n", Devices: append(many, cluster.DeviceSummary{Kind: 200, Count: 1})}, cluster.ErrBadMeta},
		{"over 512 bytes", cluster.Meta{NodeID: strings.Repeat("n", 128), QUICAddr: strings.Repeat("h", 240) + ":7000", Devices: many}, cluster.ErrMetaTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if b, err := tc.m.Encode(); !errors.Is(err, tc.want) {
				t.Errorf("Encode = %d bytes, %v; want error matching %v", len(b), err, tc.want)
			}
		})
	}
}

// FuzzDecodeMeta: arbitrary bytes never crash the decoder, and whatever
// decodes re-encodes to the same bytes (the encoding is canonical).
// Seeds: testdata/fuzz/FuzzDecodeMeta and the valid encodings below.
func FuzzDecodeMeta(f *testing.F) {
	for _, m := range []cluster.Meta{
		sampleMeta(),
		{NodeID: "n"},
		{NodeID: "n", Leaving: true, QUICAddr: "[::1]:1", Devices: []cluster.DeviceSummary{{Kind: 3, Count: 2, Unified: true}}},
	} {
		b, err := m.Encode()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		m, err := cluster.DecodeMeta(in)
		if err != nil {
			if !errors.Is(err, cluster.ErrBadMeta) {
				t.Fatalf("error %v does not match ErrBadMeta", err)
			}
			return
		}
		out, err := m.Encode()
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", m, err)
		}
		if !bytes.Equal(out, in) {
			t.Fatalf("Encode(DecodeMeta(%x)) = %x", in, out)
		}
	})
}

func BenchmarkEncodeMeta(b *testing.B) {
	m := sampleMeta()
	b.ReportAllocs()
	var n int
	for b.Loop() {
		out, err := m.Encode()
		if err != nil {
			b.Fatal(err)
		}
		n = len(out)
	}
	b.ReportMetric(float64(n), "bytes/meta")
}

func BenchmarkDecodeMeta(b *testing.B) {
	in, _ := sampleMeta().Encode()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := cluster.DecodeMeta(in); err != nil {
			b.Fatal(err)
		}
	}
}

func TestDeviceSummaryString(t *testing.T) {
	for _, tc := range []struct {
		d    cluster.DeviceSummary
		want string
	}{
		{cluster.DeviceSummary{Kind: cluster.DeviceCUDA, Count: 8, MemBytes: 8 * 141 << 30}, "cuda×8/1128GiB"},
		{cluster.DeviceSummary{Kind: cluster.DeviceCPU, Count: 1, MemBytes: 512 << 30, Unified: true}, "cpu×1/512GiB/unified"},
		{cluster.DeviceSummary{Kind: 9, Count: 2}, "kind(9)×2"},
	} {
		if got := tc.d.String(); got != tc.want {
			t.Errorf("%+v.String() = %q, want %q", tc.d, got, tc.want)
		}
	}
}

// TestMetaRoundTripProperty_C1: random valid metadata survives
// Encode/DecodeMeta unchanged, or is refused by Encode only for size.
func TestMetaRoundTripProperty_C1(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var m cluster.Meta
		m.NodeID = rapid.StringMatching(`[a-z0-9.-]{1,128}`).Draw(t, "id")
		m.BootID = rapid.Uint64().Draw(t, "boot")
		if rapid.Bool().Draw(t, "quic") {
			m.QUICAddr = rapid.StringMatching(`[a-z0-9.]{1,60}`).Draw(t, "host") + ":" +
				strconv.Itoa(rapid.IntRange(1, 65535).Draw(t, "port"))
		}
		m.ProtocolVersion = rapid.Uint16().Draw(t, "proto")
		m.Leaving = rapid.Bool().Draw(t, "leaving")
		kinds := rapid.SliceOfNDistinct(rapid.IntRange(1, 255), 0, cluster.MaxDeviceKinds, rapid.ID).Draw(t, "kinds")
		slices.Sort(kinds)
		for _, k := range kinds {
			m.Devices = append(m.Devices, cluster.DeviceSummary{
				Kind:     cluster.DeviceKind(k),
				Count:    rapid.Uint32Range(1, ^uint32(0)).Draw(t, "count"),
				MemBytes: rapid.Uint64().Draw(t, "mem"),
				Unified:  rapid.Bool().Draw(t, "unified"),
			})
		}
		b, err := m.Encode()
		if errors.Is(err, cluster.ErrMetaTooLarge) {
			return
		}
		if err != nil {
			t.Fatalf("Encode(%+v): %v", m, err)
		}
		got, err := cluster.DecodeMeta(b)
		if err != nil || !reflect.DeepEqual(got, m) {
			t.Fatalf("DecodeMeta(Encode(m)) = %+v, %v; want %+v", got, err, m)
		}
	})
}
