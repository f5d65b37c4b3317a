package cpu

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// HostMemory is the physical memory this process may use, in bytes: the
// MemTotal of /proc/meminfo, or the memory limit of the process's cgroup
// (v2 memory.max of its cgroup and their parents, v1
// memory.limit_in_bytes) where that is lower, as in a container. source
// says which it was, for logs. Memory budgets (device.MemoryLimit) are
// shares of it. Where /proc/meminfo cannot be read (not Linux) it returns
// an error and the caller has no size to budget by.
func HostMemory() (bytes uint64, source string, err error) { return hostMemory("/") }

// hostMemory is HostMemory with the file system rooted at root (tests).
func hostMemory(root string) (uint64, string, error) {
	total, err := memTotal(filepath.Join(root, "proc", "meminfo"))
	if err != nil {
		return 0, "", fmt.Errorf("cpu: host memory size: %w", err)
	}
	if lim, where := cgroupLimit(root); lim > 0 && lim < total {
		return lim, "cgroup memory limit (" + where + ")", nil
	}
	return total, "MemTotal of /proc/meminfo", nil
}

func memTotal(file string) (uint64, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[0] != "MemTotal:" {
			continue
		}
		n, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil || n == 0 {
			return 0, fmt.Errorf("%s: MemTotal %q is not a size", file, f[1])
		}
		if len(f) > 2 && f[2] == "kB" {
			n *= 1024
		}
		return n, nil
	}
	return 0, fmt.Errorf("%s has no MemTotal line", file)
}

// cgroupLimit is the lowest memory limit of the process's cgroups (0:
// none found) and the file that set it.
func cgroupLimit(root string) (uint64, string) {
	data, err := os.ReadFile(filepath.Join(root, "proc", "self", "cgroup"))
	if err != nil {
		return 0, ""
	}
	var best uint64
	var where string
	take := func(file string) {
		n, err := readLimit(filepath.Join(root, file))
		if err == nil && n > 0 && (best == 0 || n < best) {
			best, where = n, file
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		// hierarchy-ID:controller-list:cgroup-path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		p := path.Clean("/" + parts[2])
		switch {
		case parts[0] == "0" && parts[1] == "": // cgroup v2: this cgroup and every parent
			for {
				take(path.Join("/sys/fs/cgroup", p, "memory.max"))
				if p == "/" {
					break
				}
				p = path.Dir(p)
			}
		case hasController(parts[1], "memory"): // cgroup v1
			take(path.Join("/sys/fs/cgroup/memory", p, "memory.limit_in_bytes"))
			// In a container the hierarchy is often mounted at its own
			// cgroup, so the path above does not exist.
			take("/sys/fs/cgroup/memory/memory.limit_in_bytes")
		}
	}
	return best, where
}

func hasController(list, c string) bool {
	for _, x := range strings.Split(list, ",") {
		if x == c {
			return true
		}
	}
	return false
}

// readLimit reads a cgroup memory limit file: a number of bytes, or "max"
// (no limit: 0).
func readLimit(file string) (uint64, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(data))
	if s == "max" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, errors.New(file + ": not a number")
	}
	return n, nil
}
