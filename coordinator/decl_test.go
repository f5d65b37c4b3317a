package coordinator

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/acpp/acpp/device"
	"github.com/acpp/acpp/proto"
)

// declJob is a job over hand-made nodes with the given inventories: each
// node has a CPU device (form go) and a CUDA device (form ptx).
func declJob(invs ...*proto.Inventory) *Job {
	j := &Job{}
	for _, inv := range invs {
		ns := &nodeState{name: inv.Node, inv: inv}
		j.nodes = append(j.nodes, ns)
		j.devices = append(j.devices,
			&Device{Node: inv.Node, ID: "cpu:0", Kind: "cpu", Forms: []string{"go"}, node: ns},
			&Device{Node: inv.Node, ID: "cuda:0", Kind: "cuda", Forms: []string{"ptx"}, node: ns})
	}
	return j
}

func names(j *Job, idx []int) []string {
	var out []string
	for _, i := range idx {
		out = append(out, j.devices[i].String())
	}
	return out
}

// Issue 13 §2: nodes declare their kernels with parameters and forms; a
// group is placed only on devices whose node has a form for their backend,
// and a node that does not declare the kernel gets none, whatever this
// process knows of it.
func TestPlacementFollowsNodeDeclarations_C4(t *testing.T) {
	params := []proto.KernelParam{{Name: "a", Kind: uint8(device.ArgScalar), Space: uint8(device.Private), ElemSize: 4}}
	j := declJob(
		&proto.Inventory{Node: "go", Kernels: []string{"k"}, KernelDecls: []proto.KernelDecl{{Name: "k", Params: params, Forms: []string{"go"}}}},
		&proto.Inventory{Node: "both", Kernels: []string{"k"}, KernelDecls: []proto.KernelDecl{{Name: "k", Params: params, Forms: []string{"go", "ptx"}}}},
		&proto.Inventory{Node: "none", Kernels: []string{"other"}, KernelDecls: []proto.KernelDecl{{Name: "other", Forms: []string{"go"}}}},
		&proto.Inventory{Node: "old", Kernels: []string{"k"}}, // before declarations: names only
	)
	got := names(j, j.capable("k"))
	want := []string{"go/cpu:0", "both/cpu:0", "both/cuda:0", "old/cpu:0", "old/cuda:0"}
	if !slices.Equal(got, want) {
		t.Fatalf("capable devices for k: %v, want %v", got, want)
	}
	why := j.whyNoDevice("missing")
	for _, s := range []string{"go does not have it", "none does not have it"} {
		if !strings.Contains(why, s) {
			t.Errorf("whyNoDevice lacks %q: %s", s, why)
		}
	}
}

// Issue 13 §2: a node declaring a kernel with other parameters than this
// process is an error at Submit naming both declarations and the node.
func TestDeclarationMismatchNamesBothSides(t *testing.T) {
	k := device.Kernel{Name: "decltest.k", Params: []device.Param{
		{Name: "a", Kind: device.ArgScalar, Space: device.Private, ElemSize: 4},
		{Name: "x", Kind: device.ArgPointer, Space: device.GlobalDevice, ElemSize: 4},
	}, Go: func(*device.Work) {}}
	if _, err := device.Kernels.Lookup(k.Name); err != nil {
		device.MustRegister(k)
	}
	same := proto.ParamsOf(k.Params)
	other := proto.ParamsOf(k.Params[:1])
	j := declJob(
		&proto.Inventory{Node: "n1", Kernels: []string{k.Name}, KernelDecls: []proto.KernelDecl{{Name: k.Name, Params: same, Forms: []string{"go"}}}},
		&proto.Inventory{Node: "n2", Kernels: []string{k.Name}, KernelDecls: []proto.KernelDecl{{Name: k.Name, Params: other, Forms: []string{"go"}}}},
	)
	err := j.declMismatch(k.Name)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "node n2") ||
		!strings.Contains(err.Error(), "(a scalar private 4B, x pointer global_device 4B)") || !strings.Contains(err.Error(), "as (a scalar private 4B):") {
		t.Fatalf("declMismatch: %v", err)
	}
	j = declJob(&proto.Inventory{Node: "n1", Kernels: []string{k.Name}, KernelDecls: []proto.KernelDecl{{Name: k.Name, Params: same, Forms: []string{"go"}}}})
	if err := j.declMismatch(k.Name); err != nil {
		t.Fatalf("the same declaration: %v", err)
	}
}
