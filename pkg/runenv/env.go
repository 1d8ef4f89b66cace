package runenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Env returns the instance's variables as "NAME=value", with LD_PRELOAD set to the
// allocator alone when there is one. To add them to an existing environment, use
// Environ, which keeps what LD_PRELOAD already holds.
func (s Settings) Env() []string {
	out := make([]string, 0, len(s.Vars)+1)
	for _, v := range s.Vars {
		out = append(out, v.Name+"="+v.Value)
	}
	if s.AllocatorPath != "" {
		out = append(out, "LD_PRELOAD="+s.AllocatorPath)
	}
	return out
}

// Environ returns base (as from os.Environ) with the instance's variables set: each
// replaces any earlier value, except that GLIBC_TUNABLES and MALLOC_CONF keep base's other
// entries (ours last, so ours win), and the allocator goes first in LD_PRELOAD so it wins
// over the libraries already listed.
func (s Settings) Environ(base []string) []string {
	set := map[string]string{}
	for _, v := range s.Vars {
		set[v.Name] = v.Value
	}
	preload := ""
	had := map[string]string{}
	out := make([]string, 0, len(base)+len(s.Vars)+1)
	for _, kv := range base {
		k, v, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; ok {
			had[k] = v
			continue
		}
		if k == "LD_PRELOAD" {
			preload = v
			continue
		}
		out = append(out, kv)
	}
	for _, v := range s.Vars {
		out = append(out, v.Name+"="+mergeList(v.Name, had[v.Name], v.Value))
	}
	if p := mergePreload(s.AllocatorPath, preload); p != "" {
		out = append(out, "LD_PRELOAD="+p)
	}
	return out
}

// mergePreload puts lib first in an LD_PRELOAD list (separated by spaces or colons)
// without listing it twice.
func mergePreload(lib, existing string) string {
	parts := strings.FieldsFunc(existing, func(r rune) bool { return r == ':' || r == ' ' })
	if lib == "" {
		return strings.Join(parts, ":")
	}
	parts = slices.DeleteFunc(parts, func(p string) bool { return p == lib })
	return strings.Join(append([]string{lib}, parts...), ":")
}

// ShellExports returns the settings as POSIX shell lines to eval or source. A shell
// cannot pin CPUs or bind memory by itself, so those appear as a comment with the
// equivalent commands.
func (s Settings) ShellExports() string {
	var b strings.Builder
	node := "spans nodes"
	if s.NUMANode >= 0 {
		node = fmt.Sprintf("node %d", s.NUMANode)
	}
	fmt.Fprintf(&b, "# torchspeed instance %d of %d: CPUs %s (%d core(s), %s), %d intra-op / %d inter-op thread(s)\n",
		s.Instance, s.Instances, s.CPUs, s.Cores, node, s.Threads, s.InteropThreads)
	pin := "taskset -c " + s.CPUs.String()
	if s.MemBind {
		pin = fmt.Sprintf("numactl --physcpubind=%s --membind=%d", s.CPUs, s.NUMANode)
	}
	fmt.Fprintf(&b, "# pin with: torchspeed launch ... -- CMD (or %s CMD)\n", pin)
	for _, n := range s.Notes {
		fmt.Fprintf(&b, "# note: %s\n", n)
	}
	for _, v := range s.Vars {
		if lv, ok := listVars[v.Name]; ok {
			// Keep what the user's list already holds; ours go last, so they win.
			fmt.Fprintf(&b, "export %s=\"${%s:+$%s%s}\"%s\n", v.Name, v.Name, v.Name, lv.sep, shellQuote(v.Value))
			continue
		}
		fmt.Fprintf(&b, "export %s=%s\n", v.Name, shellQuote(v.Value))
	}
	if s.AllocatorPath != "" {
		fmt.Fprintf(&b, "export LD_PRELOAD=%s${LD_PRELOAD:+:$LD_PRELOAD}\n", shellQuote(s.AllocatorPath))
	}
	return b.String()
}

// shellQuote quotes a value for sh when it holds anything but plain characters.
func shellQuote(v string) string {
	if v != "" && strings.Trim(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=,+@%") == "" {
		return v
	}
	return "'" + strings.ReplaceAll(v, "'", `'\''`) + "'"
}

// allocatorLibs are the file names each allocator's Debian package installs, best
// first, and the package that provides them.
var allocatorLibs = map[string]struct {
	files []string
	pkg   string
}{
	"jemalloc": {[]string{"libjemalloc.so.2", "libjemalloc.so"}, "libjemalloc2"},
	"tcmalloc": {[]string{"libtcmalloc.so.4", "libtcmalloc_minimal.so.4", "libtcmalloc.so"}, "libgoogle-perftools4"},
}

// DefaultLibDirs are searched for allocator libraries after LD_LIBRARY_PATH.
var DefaultLibDirs = []string{
	"/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64",
	"/usr/local/lib", "/usr/lib", "/opt/conda/lib",
}

// FindAllocator returns the path of the shared library for an allocator ("jemalloc" or
// "tcmalloc"), searching dirs, or LD_LIBRARY_PATH and DefaultLibDirs when dirs is nil.
func FindAllocator(name string, dirs []string) (string, error) {
	lib, ok := allocatorLibs[name]
	if !ok {
		return "", fmt.Errorf("allocator %q: want jemalloc or tcmalloc", name)
	}
	if dirs == nil {
		if llp := os.Getenv("LD_LIBRARY_PATH"); llp != "" {
			dirs = append(dirs, filepath.SplitList(llp)...)
		}
		dirs = append(dirs, DefaultLibDirs...)
	}
	for _, f := range lib.files {
		for _, d := range dirs {
			if d == "" {
				continue
			}
			p := filepath.Join(d, f)
			st, err := os.Stat(p)
			if err == nil && !st.IsDir() {
				return p, nil
			}
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return "", fmt.Errorf("allocator %s: %w", name, err)
			}
		}
	}
	return "", fmt.Errorf("allocator %s not installed (no %s in %s): apt-get install %s",
		name, strings.Join(lib.files, " or "), strings.Join(dirs, ":"), lib.pkg)
}
