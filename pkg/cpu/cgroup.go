package cpu

import (
	"math"
	"path/filepath"
	"strconv"
	"strings"
)

// mount is one cgroup mount from /proc/self/mountinfo.
type mount struct {
	root, point string // the hierarchy path mounted, and where
	v2          bool
	controllers map[string]bool // v1 only
}

// membership is one line of /proc/self/cgroup.
type membership struct {
	v2          bool
	controllers map[string]bool
	path        string
}

// cgroup finds the cgroup directories that hold the cpu and cpuset controllers of this
// process, through /proc/self/cgroup (which group) and mountinfo (where it is mounted),
// and reads the CPU quota and the effective cpuset from them.
func (r *reader) cgroup(p *Probe) {
	ms, err := r.read("proc/self/cgroup")
	if err != nil {
		r.note("no proc/self/cgroup; cgroup limits unknown")
		return
	}
	mi, err := r.read("proc/self/mountinfo")
	if err != nil {
		r.note("no proc/self/mountinfo; cgroup limits unknown")
		return
	}
	members := parseProcCgroup(ms)
	mounts := parseMountinfo(mi)

	cpuDir, cpuV2 := r.controllerDir(members, mounts, "cpu")
	setDir, setV2 := r.controllerDir(members, mounts, "cpuset")
	cg := &p.Cgroup
	switch {
	case cpuDir != nil && cpuV2:
		cg.Version = 2
	case cpuDir != nil:
		cg.Version = 1
	case setDir != nil && setV2:
		cg.Version = 2
	case setDir != nil:
		cg.Version = 1
	}
	if cpuDir != nil {
		cg.CPUDir = cpuDir.dir
		r.quota(cg, cpuDir, cpuV2)
	}
	if setDir != nil {
		cg.CpusetDir = setDir.dir
		names := []string{"cpuset.effective_cpus", "cpuset.cpus"}
		if setV2 {
			names = []string{"cpuset.cpus.effective", "cpuset.cpus"}
		}
		// The effective list already folds in the ancestors; an empty "cpuset.cpus"
		// in v2 means "inherit", so keep walking up until a non-empty one.
		for _, dir := range setDir.upward() {
			for _, name := range names {
				s, err := r.read(filepath.Join(dir, name))
				if err != nil || s == "" {
					continue
				}
				set, err := ParseCPUList(s)
				if err != nil {
					r.note("%s: %v", filepath.Join(dir, name), err)
					continue
				}
				cg.Cpuset = set
				return
			}
		}
	}
}

// cgDir is a cgroup directory (relative to the root) and the mount point it lies under,
// which bounds the walk to the ancestors.
type cgDir struct{ dir, top string }

// upward lists dir and its ancestors up to the mount point.
func (d *cgDir) upward() []string {
	var out []string
	for dir := d.dir; ; dir = filepath.Dir(dir) {
		out = append(out, dir)
		if dir == d.top || !strings.HasPrefix(dir, d.top) || dir == "." || dir == "/" {
			return out
		}
	}
}

// controllerDir returns where a controller's files are for this process: a v1
// hierarchy that names the controller wins (hybrid systems keep cpu in v1); otherwise
// the v2 group.
func (r *reader) controllerDir(members []membership, mounts []mount, ctrl string) (*cgDir, bool) {
	for _, m := range members {
		if m.v2 || !m.controllers[ctrl] {
			continue
		}
		for _, mt := range mounts {
			if !mt.v2 && mt.controllers[ctrl] {
				if d := r.groupDir(mt, m.path); d != nil {
					return d, false
				}
			}
		}
	}
	for _, m := range members {
		if !m.v2 {
			continue
		}
		for _, mt := range mounts {
			if !mt.v2 {
				continue
			}
			// The root group has no cpu.max or cpuset files yet still is the group:
			// report it, and let the readers find nothing to limit.
			if d := r.groupDir(mt, m.path); d != nil {
				return d, true
			}
		}
	}
	return nil, false
}

// groupDir maps a cgroup path to a directory under the mount. In a container with its
// own cgroup namespace the path is "/" and the mount root is "/"; with the host's
// namespace the path names the container's group and the mount root may be that group
// or "/": strip the mount root when it prefixes the path, and fall back to the mount
// point itself when the joined directory is not there.
func (r *reader) groupDir(mt mount, path string) *cgDir {
	top := strings.TrimPrefix(mt.point, "/")
	rel := path
	if mt.root != "/" && strings.HasPrefix(path, mt.root) {
		rel = strings.TrimPrefix(path, mt.root)
	}
	dir := filepath.Join(top, rel)
	if r.exists(dir) {
		return &cgDir{dir: dir, top: filepath.Clean(top)}
	}
	if r.exists(top) {
		return &cgDir{dir: filepath.Clean(top), top: filepath.Clean(top)}
	}
	return nil
}

// quota keeps the tightest CPU bandwidth limit on the way up: a parent's limit caps
// every child even if the child says "max".
func (r *reader) quota(cg *Cgroup, d *cgDir, v2 bool) {
	best := math.Inf(1)
	for _, dir := range d.upward() {
		var q, per int64
		if v2 {
			s, err := r.read(filepath.Join(dir, "cpu.max"))
			if err != nil {
				continue
			}
			f := strings.Fields(s)
			if len(f) == 0 || f[0] == "max" {
				continue
			}
			q, _ = strconv.ParseInt(f[0], 10, 64)
			per = 100000
			if len(f) > 1 {
				per, _ = strconv.ParseInt(f[1], 10, 64)
			}
		} else {
			var err error
			if q, err = r.readInt(filepath.Join(dir, "cpu.cfs_quota_us")); err != nil || q <= 0 {
				continue
			}
			if per, err = r.readInt(filepath.Join(dir, "cpu.cfs_period_us")); err != nil {
				continue
			}
		}
		if q <= 0 || per <= 0 {
			continue
		}
		if c := float64(q) / float64(per); c < best {
			best = c
			cg.QuotaUs, cg.PeriodUs, cg.QuotaCPUs = q, per, c
		}
	}
}

func parseProcCgroup(s string) []membership {
	var out []membership
	for _, line := range strings.Split(s, "\n") {
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) != 3 {
			continue
		}
		m := membership{path: f[2], controllers: map[string]bool{}}
		if f[0] == "0" && f[1] == "" {
			m.v2 = true
		}
		for _, c := range strings.Split(f[1], ",") {
			if c != "" {
				m.controllers[c] = true
			}
		}
		out = append(out, m)
	}
	return out
}

func parseMountinfo(s string) []mount {
	var out []mount
	for _, line := range strings.Split(s, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 1 {
			continue
		}
		mt := mount{root: unescapeMount(f[3]), point: unescapeMount(f[4]), controllers: map[string]bool{}}
		switch g[0] {
		case "cgroup2":
			mt.v2 = true
		case "cgroup":
			if len(g) >= 3 {
				for _, o := range strings.Split(g[2], ",") {
					mt.controllers[o] = true
				}
			}
		default:
			continue
		}
		out = append(out, mt)
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
