package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/acpp/acpp/jobfile"
	"github.com/acpp/acpp/jobfile/npy"
)

// FuzzInitFile: a buffer's init file, raw or .npy, is read (exactly the
// buffer's bytes, the file's last ones) or refused with an error, and
// closed either way; never a panic, nor an allocation the file's header
// asks for. (A refused file stayed open: the fuzzer ran out of
// descriptors.) The buffer is
// float32 [2, 3]. Seeds: the right .npy and raw files, a .npy of another
// type and shape, one with data past its header's array.
func FuzzInitFile(f *testing.F) {
	data := make([]byte, 24)
	for i := range data {
		data[i] = byte(i)
	}
	var good, other bytes.Buffer
	if err := npy.Write(&good, "<f4", []int{2, 3}, data); err != nil {
		f.Fatal(err)
	}
	if err := npy.Write(&other, "<i2", []int{3, 4}, data); err != nil {
		f.Fatal(err)
	}
	f.Add(good.Bytes(), true)
	f.Add(data, false)
	f.Add(other.Bytes(), true)
	f.Add(append(bytes.Clone(good.Bytes()), 0), true)
	f.Fuzz(func(t *testing.T, file []byte, isNPY bool) {
		s := &jobfile.Buffer{Name: "a", Type: "float32", Range: []int{2, 3}}
		format := jobfile.FormatRaw
		if isNPY {
			format = jobfile.FormatNPY
		}
		path := filepath.Join(t.TempDir(), "a.bin")
		if err := os.WriteFile(path, file, 0o600); err != nil {
			t.Fatal(err)
		}
		fds := openFiles(t)
		got, err := readInit(path, s, format)
		if n := openFiles(t); n != fds {
			t.Fatalf("%d files open after readInit (%v), %d before: it left the init file open", n, err, fds)
		}
		if err != nil {
			return
		}
		if len(got) != s.Bytes() || len(file) < len(got) || !bytes.Equal(got, file[len(file)-len(got):]) {
			t.Fatalf("read %d bytes %x from a %d-byte %s file; want its last %d", len(got), got, len(file), format, s.Bytes())
		}
	})
}

// openFiles is the number of files this process has open (Linux), or -1.
func openFiles(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}
