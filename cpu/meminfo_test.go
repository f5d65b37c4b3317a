package cpu

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const meminfo = "MemTotal:       16384000 kB\nMemFree:         1000 kB\nMemAvailable:    8000000 kB\n"

// TestHostMemory: MemTotal, lowered by the process's cgroup limit (v2 at
// its cgroup or a parent, v1), never raised by it; "max" is no limit.
func TestHostMemory(t *testing.T) {
	const total = 16384000 * 1024
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  uint64
		src   string
	}{
		{"meminfo only", map[string]string{"proc/meminfo": meminfo}, total, "MemTotal"},
		{"v2 limit at a parent", map[string]string{"proc/meminfo": meminfo, "proc/self/cgroup": "0::/a/b\n",
			"sys/fs/cgroup/a/b/memory.max": "max\n", "sys/fs/cgroup/a/memory.max": "4294967296\n"}, 4 << 30, "cgroup"},
		{"v2 max everywhere", map[string]string{"proc/meminfo": meminfo, "proc/self/cgroup": "0::/a\n",
			"sys/fs/cgroup/a/memory.max": "max\n"}, total, "MemTotal"},
		{"v2 limit above MemTotal", map[string]string{"proc/meminfo": meminfo, "proc/self/cgroup": "0::/\n",
			"sys/fs/cgroup/memory.max": "99999999999999\n"}, total, "MemTotal"},
		{"v1 container", map[string]string{"proc/meminfo": meminfo, "proc/self/cgroup": "5:cpu,memory:/docker/x\n0::/\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "1073741824\n"}, 1 << 30, "cgroup"},
		{"v1 unlimited", map[string]string{"proc/meminfo": meminfo, "proc/self/cgroup": "4:memory:/x\n",
			"sys/fs/cgroup/memory/x/memory.limit_in_bytes": "9223372036854771712\n"}, total, "MemTotal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, src, err := hostMemory(writeTree(t, tc.files))
			if err != nil || got != tc.want || !strings.Contains(src, tc.src) {
				t.Errorf("hostMemory = %d, %q, %v; want %d from %s", got, src, err, tc.want, tc.src)
			}
		})
	}
	if _, _, err := hostMemory(writeTree(t, map[string]string{"proc/meminfo": "MemFree: 1 kB\n"})); err == nil {
		t.Error("hostMemory without a MemTotal line: no error")
	}
	if runtime.GOOS == "linux" {
		if n, src, err := HostMemory(); err != nil || n == 0 {
			t.Errorf("HostMemory() = %d, %q, %v on Linux; want a size", n, src, err)
		}
	}
}
