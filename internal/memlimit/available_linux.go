package memlimit

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Available is the memory this process may still allocate, in bytes, and where the figure
// comes from: the smaller of MemAvailable (/proc/meminfo) and the cgroup's limit less its
// usage. 0 when unknown.
func Available() (int64, string) {
	avail, source := memAvailable(), "MemAvailable in /proc/meminfo"
	if c := cgroupMemoryLeft(); c > 0 && (avail <= 0 || c < avail) {
		avail, source = c, "the cgroup's memory limit less its usage"
	}
	return avail, source
}

// memAvailable reads MemAvailable from /proc/meminfo in bytes (0 when unknown).
func memAvailable() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "MemAvailable:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// cgroupMemoryLeft is the process's cgroup memory limit less its usage (v2, else v1), 0 when
// there is no limit or it cannot be read.
func cgroupMemoryLeft() int64 {
	raw, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0
	}
	for _, line := range bytes.Split(raw, []byte("\n")) {
		parts := strings.SplitN(string(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			if left := limitLess(filepath.Join("/sys/fs/cgroup", parts[2], "memory.max"), filepath.Join("/sys/fs/cgroup", parts[2], "memory.current")); left > 0 {
				return left
			}
		case strings.Contains(","+parts[1]+",", ",memory,"):
			for _, dir := range []string{filepath.Join("/sys/fs/cgroup/memory", parts[2]), "/sys/fs/cgroup/memory"} {
				if left := limitLess(filepath.Join(dir, "memory.limit_in_bytes"), filepath.Join(dir, "memory.usage_in_bytes")); left > 0 {
					return left
				}
			}
		}
	}
	return 0
}

// limitLess reads a limit file and a usage file; 0 when the limit is "max", absurdly large
// (cgroup v1's "no limit" is about 2^63) or unreadable.
func limitLess(limitFile, usageFile string) int64 {
	read := func(p string) int64 {
		b, err := os.ReadFile(p)
		if err != nil {
			return -1
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return -1
		}
		return v
	}
	limit := read(limitFile)
	if limit <= 0 || limit >= 1<<62 {
		return 0
	}
	used := max(read(usageFile), 0)
	return max(limit-used, 1)
}
