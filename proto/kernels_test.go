package proto

import (
	"errors"
	"strings"
	"testing"
	// Tests only: proto itself imports no codec (transport/ owns msgpack),
	// but its decoder is what the fuzz target must exercise.
)

func goodKernels() JobKernels {
	return JobKernels{Job: 7, Kernels: []KernelSpec{{
		Name:   "mysaxpy@0a1b2c",
		Params: []KernelParam{{Name: "a", Kind: 5, Space: 6, ElemSize: 4}, {Name: "x", Kind: 1, Space: 7, ElemSize: 4}},
		PTX:    []byte(".version 7.0\n.visible .entry saxpy(.param .u64 p){ret;}\n"),
		Entry:  "saxpy",
	}}}
}

// TestJobKernelsValidate_C6: a malformed request (bad names, sizes over
// the bounds, unknown parameter kinds) is refused with an error that wraps
// ErrMalformed and names what is wrong, before a node parses a module.
func TestJobKernelsValidate_C6(t *testing.T) {
	tests := []struct {
		name string
		mod  func(r *JobKernels)
		want string // "" means valid
	}{
		{"good", func(*JobKernels) {}, ""},
		{"no kernels", func(r *JobKernels) { r.Kernels = nil }, "no kernels"},
		{"empty name", func(r *JobKernels) { r.Kernels[0].Name = "" }, "name"},
		{"name with a slash", func(r *JobKernels) { r.Kernels[0].Name = "../etc" }, "name"},
		{"name starting with a digit", func(r *JobKernels) { r.Kernels[0].Name = "1k" }, "name"},
		{"name too long", func(r *JobKernels) { r.Kernels[0].Name = strings.Repeat("k", MaxKernelName+1) }, "name"},
		{"name at the limit", func(r *JobKernels) { r.Kernels[0].Name = strings.Repeat("k", MaxKernelName) }, ""},
		{"entry not an identifier", func(r *JobKernels) { r.Kernels[0].Entry = "sax py" }, "entry"},
		{"empty module", func(r *JobKernels) { r.Kernels[0].PTX = nil }, "empty PTX module"},
		{"CUDA C source", func(r *JobKernels) {
			r.Kernels[0].PTX, r.Kernels[0].CUDA = nil, []byte(`extern "C" __global__ void saxpy() {}`)
			r.Kernels[0].File, r.Kernels[0].Options = "k/saxpy.cu", []string{"--fmad=false"}
		}, ""},
		{"PTX and CUDA C", func(r *JobKernels) { r.Kernels[0].CUDA = []byte("x") }, "both PTX and CUDA"},
		{"CUDA C too large", func(r *JobKernels) { r.Kernels[0].PTX, r.Kernels[0].CUDA = nil, make([]byte, MaxKernelModule+1) }, "CUDA C source of"},
		{"CUDA file with a newline", func(r *JobKernels) {
			r.Kernels[0].PTX, r.Kernels[0].CUDA, r.Kernels[0].File = nil, []byte("x"), "a\nb.cu"
		}, "file name"},
		{"CUDA option with NUL", func(r *JobKernels) {
			r.Kernels[0].PTX, r.Kernels[0].CUDA, r.Kernels[0].Options = nil, []byte("x"), []string{"-D\x00"}
		}, "option 0"},
		{"options with PTX", func(r *JobKernels) { r.Kernels[0].Options = []string{"-O3"} }, "belong to CUDA C"},
		{"module too large", func(r *JobKernels) { r.Kernels[0].PTX = make([]byte, MaxKernelModule+1) }, "at most 12582912"},
		{"modules too large together", func(r *JobKernels) {
			k := r.Kernels[0]
			k.PTX = make([]byte, MaxKernelModule/2+1)
			k2 := k
			k2.Name = "other"
			r.Kernels = []KernelSpec{k, k2}
		}, "together"},
		{"module at the limit", func(r *JobKernels) { r.Kernels[0].PTX = make([]byte, MaxKernelModule) }, ""},
		{"CUDA C at the limit", func(r *JobKernels) { r.Kernels[0].PTX, r.Kernels[0].CUDA = nil, make([]byte, MaxKernelModule) }, ""},
		{"modules together at the limit", func(r *JobKernels) {
			k := r.Kernels[0]
			k.PTX = make([]byte, MaxKernelModule/2)
			k2 := k
			k2.Name = "other"
			r.Kernels = []KernelSpec{k, k2}
		}, ""},
		{"twice", func(r *JobKernels) { r.Kernels = append(r.Kernels, r.Kernels[0]) }, "twice"},
		{"the most kernels", func(r *JobKernels) {
			for i := range MaxKernelsPerRequest - 1 {
				k := r.Kernels[0]
				k.Name = "k" + strings.Repeat("x", i)
				r.Kernels = append(r.Kernels, k)
			}
		}, ""},
		{"entry at the limit", func(r *JobKernels) { r.Kernels[0].Entry = strings.Repeat("e", MaxKernelName) }, ""},
		{"entry too long", func(r *JobKernels) { r.Kernels[0].Entry = strings.Repeat("e", MaxKernelName+1) }, "entry"},
		{"the most params", func(r *JobKernels) {
			r.Kernels[0].Params = make([]KernelParam, MaxKernelParams)
			for i := range r.Kernels[0].Params {
				r.Kernels[0].Params[i] = KernelParam{Kind: 1, Space: 1, ElemSize: MaxParamElemSize}
			}
		}, ""},
		{"too many", func(r *JobKernels) {
			for i := range MaxKernelsPerRequest {
				k := r.Kernels[0]
				k.Name = "k" + strings.Repeat("x", i)
				r.Kernels = append(r.Kernels, k)
			}
		}, "65 kernels in one request, at most 64"},
		{"kind 0", func(r *JobKernels) { r.Kernels[0].Params[0].Kind = 0 }, "kind 0"},
		{"kind 6", func(r *JobKernels) { r.Kernels[0].Params[0].Kind = 6 }, "kind 6"},
		{"space 8", func(r *JobKernels) { r.Kernels[0].Params[1].Space = 8 }, "address space 8"},
		{"elem size", func(r *JobKernels) { r.Kernels[0].Params[1].ElemSize = MaxParamElemSize + 1 }, "element size"},
		{"param name not UTF-8", func(r *JobKernels) { r.Kernels[0].Params[0].Name = "\xff" }, "UTF-8"},
		{"too many params", func(r *JobKernels) {
			r.Kernels[0].Params = make([]KernelParam, MaxKernelParams+1)
		}, "parameters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := goodKernels()
			tt.mod(&r)
			err := r.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want ErrMalformed mentioning %q", err, tt.want)
			}
		})
	}
}

func TestMsgJobKernelsName(t *testing.T) {
	// node.go's list registers its names after this file's init: a clash
	// of values would rename this one.
	if got := MsgJobKernels.String(); got != "MsgJobKernels" {
		t.Fatalf("MsgJobKernels.String() = %q; its value %d collides with another message", got, uint16(MsgJobKernels))
	}
}

func TestMsgUnmapRefName(t *testing.T) {
	if got := MsgUnmapRef.String(); got != "MsgUnmapRef" {
		t.Fatalf("MsgUnmapRef.String() = %q; its value %d collides with another message", got, uint16(MsgUnmapRef))
	}
}

// C3: an unmap request names 1 to MaxUnmapAllocs allocations.
func TestUnmapRefValidate_C3(t *testing.T) {
	for _, n := range []int{0, MaxUnmapAllocs + 1} {
		r := UnmapRef{Job: 1, Allocs: make([]uint64, n)}
		if err := r.Validate(); !errors.Is(err, ErrMalformed) {
			t.Errorf("%d allocations: %v, want ErrMalformed", n, err)
		}
	}
	if err := (&UnmapRef{Job: 1, Allocs: []uint64{7}}).Validate(); err != nil {
		t.Errorf("one allocation: %v", err)
	}
}
