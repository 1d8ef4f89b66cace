// Command mkfixtures writes the /sys and /proc fixture trees the pkg/cpu tests read.
// The trees are committed; rerun after changing a machine description here:
//
//	go run ./pkg/cpu/testdata/mkfixtures pkg/cpu/testdata
//
// Each machine follows the layout the Linux kernel gives real ones (CPU numbering with
// SMT siblings offset by the core count, one node directory per NUMA node, cache index
// directories per CPU), scaled to what the tests need.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

type cacheSpec struct {
	level          int
	typ            string
	size           string
	sharedByCores  int // physical cores sharing one instance; 0 = whole socket
	shareWithSibls bool
}

type machine struct {
	name                           string
	vendor, model                  string
	family, modelNum, stepping     int
	flags                          string
	sockets, cores, threads, nodes int
	offline                        []int
	noNodeDir                      bool
	memKB                          int64
	caches                         []cacheSpec
	affinity                       string
	procCgroup, mountinfo          string
	cgroupFiles                    map[string]string
	maps                           []string
	thp, defrag                    string
	hugeTotal                      int
}

const (
	base      = "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht syscall nx lm constant_tsc rep_good nopl xtopology cpuid pni pclmulqdq ssse3 cx16 sse4_1 sse4_2 x2apic movbe popcnt aes xsave rdrand lahf_lm abm 3dnowprefetch"
	broadwell = base + " hypervisor fma avx f16c avx2 bmi1 bmi2 erms invpcid rdseed adx smap xsaveopt arat"
	cascade   = base + " ds_cpl vmx smx est tm2 pdcm pcid dca fma avx f16c avx2 bmi1 bmi2 erms invpcid mpx avx512f avx512dq rdseed adx smap clflushopt clwb avx512cd avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves avx512_vnni md_clear flush_l1d arch_capabilities"
	sapphire  = base + " hypervisor fma avx f16c avx2 bmi1 bmi2 erms invpcid avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb avx512cd sha_ni avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves avx_vnni avx512_bf16 arat avx512vbmi umip pku ospke waitpkg avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg avx512_vpopcntdq rdpid cldemote movdiri movdir64b fsrm md_clear serialize tsxldtrk amx_bf16 avx512_fp16 amx_tile amx_int8 arch_capabilities"
	zen2      = base + " mmxext fxsr_opt pdpe1gb rdtscp nonstop_tsc extd_apicid aperfmperf pni monitor fma f16c avx avx2 bmi1 bmi2 cr8_legacy sse4a misalignsse osvw ibs skinit wdt tce topoext perfctr_core perfctr_nb bpext perfctr_llc mwaitx cpb cat_l3 cdp_l3 hw_pstate ssbd mba ibrs ibpb stibp smep erms cqm rdt_a rdseed adx smap clflushopt clwb sha_ni xsaveopt xsavec xgetbv1 xsaves cqm_llc cqm_occup_llc cqm_mbm_total cqm_mbm_local clzero irperf xsaveerptr rdpru wbnoinvd arat npt lbrv svm_lock nrip_save tsc_scale vmcb_clean flushbyasid decodeassists pausefilter pfthreshold avic v_vmsave_vmload vgif umip rdpid overflow_recov succor smca"
	zen3      = zen2 + " invpcid pku ospke vaes vpclmulqdq fsrm"
)

var machines = []machine{
	{
		// A cloud VM: 4 vCPUs, no SMT exposed, one node, GNU OpenMP (Debian libtorch).
		name: "vm-avx2", vendor: "GenuineIntel", model: "Intel(R) Xeon(R) CPU E5-2686 v4 @ 2.30GHz",
		family: 6, modelNum: 79, stepping: 1, flags: broadwell,
		sockets: 1, cores: 4, threads: 1, nodes: 1, memKB: 16 << 20,
		caches:     []cacheSpec{{1, "Data", "32K", 1, true}, {1, "Instruction", "32K", 1, true}, {2, "Unified", "256K", 1, true}, {3, "Unified", "46080K", 0, true}},
		affinity:   "0-3",
		procCgroup: "0::/\n",
		mountinfo:  "26 1 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n",
		cgroupFiles: map[string]string{
			"sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory pids",
		},
		maps: []string{"/usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0", "/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13"},
		thp:  "[always] madvise never", defrag: "always defer defer+madvise [madvise] never",
	},
	{
		// A two-socket Cascade Lake server: 10 cores per socket, 2 threads per core,
		// one NUMA node per socket; Intel OpenMP loaded (an IPEX-style build).
		name: "xeon-2s", vendor: "GenuineIntel", model: "Intel(R) Xeon(R) Silver 4210R CPU @ 2.40GHz",
		family: 6, modelNum: 85, stepping: 7, flags: cascade,
		sockets: 2, cores: 10, threads: 2, nodes: 2, memKB: 192 << 20,
		caches:     []cacheSpec{{1, "Data", "32K", 1, true}, {1, "Instruction", "32K", 1, true}, {2, "Unified", "1024K", 1, true}, {3, "Unified", "14080K", 0, true}},
		affinity:   "0-39",
		procCgroup: "0::/user.slice/user-1000.slice/session-3.scope\n",
		mountinfo:  "26 1 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n",
		cgroupFiles: map[string]string{
			"sys/fs/cgroup/cgroup.controllers":                                               "cpuset cpu io memory pids",
			"sys/fs/cgroup/user.slice/user-1000.slice/session-3.scope/cgroup.procs":          "4242",
			"sys/fs/cgroup/user.slice/cpu.max":                                               "max 100000",
			"sys/fs/cgroup/user.slice/user-1000.slice/session-3.scope/cpu.max":               "max 100000",
			"sys/fs/cgroup/user.slice/user-1000.slice/session-3.scope/cpuset.cpus.effective": "0-39",
		},
		maps: []string{"/opt/intel/oneapi/compiler/lib/libiomp5.so", "/usr/lib/libtorch_cpu.so"},
		thp:  "always [madvise] never", defrag: "always defer defer+madvise [madvise] never", hugeTotal: 1024,
	},
	{
		// A Kubernetes container on a 64-CPU Sapphire Rapids host: the pod's cgroup
		// (host cgroup namespace) caps it at 4 CPUs with cpu.max, the container's own
		// cpu.max says "max", and the static CPU manager gave it 8 cores (16 CPUs).
		name: "container-v2", vendor: "GenuineIntel", model: "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz",
		family: 6, modelNum: 143, stepping: 8, flags: sapphire,
		sockets: 1, cores: 32, threads: 2, nodes: 1, memKB: 256 << 20,
		// No cache directories: keeps the 64-CPU tree small, and tests the probe without them.
		affinity:   "8-15,40-47",
		procCgroup: "0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope\n",
		mountinfo:  "1123 1100 0:29 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup rw,nsdelegate\n",
		cgroupFiles: map[string]string{
			"sys/fs/cgroup/kubepods.slice/cpu.max":                                                            "max 100000",
			"sys/fs/cgroup/kubepods.slice/kubepods-pod1.slice/cpu.max":                                        "400000 100000",
			"sys/fs/cgroup/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope/cpu.max":               "max 100000",
			"sys/fs/cgroup/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope/cpuset.cpus":           "",
			"sys/fs/cgroup/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope/cpuset.cpus.effective": "8-15,40-47",
		},
		maps: []string{"/usr/local/lib/python3.11/site-packages/torch/lib/libgomp-a34b3233.so.1", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"},
		thp:  "always [madvise] never", defrag: "always defer defer+madvise [madvise] never",
	},
	{
		// A Docker container on a cgroup v1 host (cgroupns=host, so the mount root is the
		// container's group): --cpus=2 --cpuset-cpus=2-5,18-21 on a 32-CPU EPYC.
		name: "container-v1", vendor: "AuthenticAMD", model: "AMD EPYC 7B12",
		family: 23, modelNum: 49, stepping: 0, flags: zen2,
		sockets: 1, cores: 16, threads: 2, nodes: 1, memKB: 64 << 20,
		caches:   []cacheSpec{{1, "Data", "32K", 1, true}, {1, "Instruction", "32K", 1, true}, {2, "Unified", "512K", 1, true}, {3, "Unified", "16384K", 4, true}},
		affinity: "2-5,18-21",
		procCgroup: "12:cpuset:/docker/abc123\n11:memory:/docker/abc123\n4:cpu,cpuacct:/docker/abc123\n" +
			"1:name=systemd:/docker/abc123\n0::/system.slice/containerd.service\n",
		mountinfo: "700 690 0:33 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,mode=755\n" +
			"701 700 0:34 /docker/abc123 /sys/fs/cgroup/cpuset ro,nosuid,nodev,noexec,relatime master:15 - cgroup cgroup rw,cpuset\n" +
			"702 700 0:35 /docker/abc123 /sys/fs/cgroup/cpu,cpuacct ro,nosuid,nodev,noexec,relatime master:16 - cgroup cgroup rw,cpu,cpuacct\n" +
			"703 700 0:36 /docker/abc123 /sys/fs/cgroup/memory ro,nosuid,nodev,noexec,relatime master:17 - cgroup cgroup rw,memory\n",
		cgroupFiles: map[string]string{
			"sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us":  "200000",
			"sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000",
			"sys/fs/cgroup/cpuset/cpuset.cpus":            "2-5,18-21",
			"sys/fs/cgroup/cpuset/cpuset.effective_cpus":  "2-5,18-21",
		},
		thp: "always madvise [never]", defrag: "always defer defer+madvise madvise [never]",
	},
	{
		// A bare-metal box with CPUs 2 and 3 taken offline and a kernel without NUMA
		// (no node directory); the affinity mask still names the offline CPUs.
		name: "offline-cpus", vendor: "AuthenticAMD", model: "AMD EPYC 7763 64-Core Processor",
		family: 25, modelNum: 1, stepping: 1, flags: zen3,
		sockets: 1, cores: 8, threads: 1, nodes: 1, offline: []int{2, 3}, noNodeDir: true, memKB: 32 << 20,
		caches:     []cacheSpec{{1, "Data", "32K", 1, true}, {1, "Instruction", "32K", 1, true}, {2, "Unified", "512K", 1, true}, {3, "Unified", "32768K", 8, true}},
		affinity:   "0-7",
		procCgroup: "0::/\n",
		mountinfo:  "26 1 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw\n",
		cgroupFiles: map[string]string{
			"sys/fs/cgroup/cgroup.controllers": "cpu memory pids",
		},
		maps: []string{"/usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0", "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4.5.10"},
		thp:  "always [madvise] never", defrag: "always defer defer+madvise [madvise] never",
	},
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: mkfixtures DIR")
		os.Exit(2)
	}
	for _, m := range machines {
		dir := filepath.Join(os.Args[1], m.name)
		if err := os.RemoveAll(dir); err != nil {
			fail(err)
		}
		if err := m.write(dir); err != nil {
			fail(err)
		}
		fmt.Println("wrote", dir)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "mkfixtures:", err)
	os.Exit(1)
}

// cpuOf numbers CPUs the way Linux does on Intel and AMD servers: first every core's
// first thread, socket by socket, then the second threads in the same order.
func (m machine) cpuOf(socket, core, thread int) int {
	return thread*m.sockets*m.cores + socket*m.cores + core
}

func (m machine) total() int { return m.sockets * m.cores * m.threads }

func list(cpus []int) string {
	sort.Ints(cpus)
	var parts []string
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", cpus[i], cpus[j]))
		} else {
			parts = append(parts, strconv.Itoa(cpus[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

func (m machine) write(dir string) error {
	files := map[string]string{}
	off := map[int]bool{}
	for _, c := range m.offline {
		off[c] = true
	}
	var all, online []int
	for c := 0; c < m.total(); c++ {
		all = append(all, c)
		if !off[c] {
			online = append(online, c)
		}
	}
	sysCPU := "sys/devices/system/cpu/"
	files[sysCPU+"possible"] = list(all)
	files[sysCPU+"present"] = list(all)
	files[sysCPU+"online"] = list(online)
	files[sysCPU+"offline"] = list(m.offline)

	socketsPerNode := m.sockets / m.nodes
	nodeCPUs := make([][]int, m.nodes)
	var cpuinfo strings.Builder
	for s := 0; s < m.sockets; s++ {
		for c := 0; c < m.cores; c++ {
			var sib []int
			for t := 0; t < m.threads; t++ {
				sib = append(sib, m.cpuOf(s, c, t))
			}
			for t := 0; t < m.threads; t++ {
				cpu := m.cpuOf(s, c, t)
				d := fmt.Sprintf("%scpu%d/", sysCPU, cpu)
				if off[cpu] {
					// The kernel removes topology and cache directories of offline CPUs.
					files[d+"online"] = "0"
					continue
				}
				files[d+"online"] = "1"
				files[d+"topology/physical_package_id"] = strconv.Itoa(s)
				files[d+"topology/core_id"] = strconv.Itoa(c)
				files[d+"topology/thread_siblings_list"] = list(append([]int(nil), sib...))
				for i, cs := range m.caches {
					share := cs.sharedByCores
					if share == 0 {
						share = m.cores
					}
					first := c / share * share
					var shared []int
					for c2 := first; c2 < first+share && c2 < m.cores; c2++ {
						for t2 := 0; t2 < m.threads; t2++ {
							shared = append(shared, m.cpuOf(s, c2, t2))
						}
					}
					cd := fmt.Sprintf("%scache/index%d/", d, i)
					files[cd+"level"] = strconv.Itoa(cs.level)
					files[cd+"type"] = cs.typ
					files[cd+"size"] = cs.size
					files[cd+"shared_cpu_list"] = list(shared)
				}
				node := s / socketsPerNode
				nodeCPUs[node] = append(nodeCPUs[node], cpu)
				fmt.Fprintf(&cpuinfo, "processor\t: %d\nvendor_id\t: %s\ncpu family\t: %d\nmodel\t\t: %d\nmodel name\t: %s\nstepping\t: %d\n"+
					"physical id\t: %d\nsiblings\t: %d\ncore id\t\t: %d\ncpu cores\t: %d\nflags\t\t: %s\n\n",
					cpu, m.vendor, m.family, m.modelNum, m.model, m.stepping, s, m.cores*m.threads, c, m.cores, m.flags)
			}
		}
	}
	files["proc/cpuinfo"] = cpuinfo.String()
	memKB := m.memKB
	if !m.noNodeDir {
		var ids []int
		for n := range nodeCPUs {
			ids = append(ids, n)
			nd := fmt.Sprintf("sys/devices/system/node/node%d/", n)
			files[nd+"cpulist"] = list(nodeCPUs[n])
			files[nd+"meminfo"] = fmt.Sprintf("Node %d MemTotal:       %d kB\nNode %d MemFree:        %d kB\nNode %d MemUsed:        %d kB\n",
				n, memKB/int64(m.nodes), n, memKB/int64(m.nodes)/2, n, memKB/int64(m.nodes)/2)
		}
		files["sys/devices/system/node/online"] = list(ids)
		files["sys/devices/system/node/possible"] = list(ids)
	}
	files["proc/meminfo"] = fmt.Sprintf("MemTotal:       %d kB\nMemFree:        %d kB\nHugePages_Total:    %d\nHugePages_Free:     %d\nHugePages_Rsvd:        0\nHugePages_Surp:        0\nHugepagesize:       2048 kB\n",
		memKB, memKB/2, m.hugeTotal, m.hugeTotal)
	files["sys/kernel/mm/transparent_hugepage/enabled"] = m.thp
	files["sys/kernel/mm/transparent_hugepage/defrag"] = m.defrag
	files["sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"] = strconv.Itoa(m.hugeTotal)
	files["proc/self/status"] = fmt.Sprintf("Name:\tinference\nState:\tR (running)\nThreads:\t1\nCpus_allowed_list:\t%s\nMems_allowed_list:\t0-%d\n", m.affinity, m.nodes-1)
	files["proc/self/cgroup"] = m.procCgroup
	files["proc/self/mountinfo"] = "22 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n" + m.mountinfo
	var maps strings.Builder
	addr := 0x7f0000000000
	for _, lib := range append([]string{"/usr/bin/inference"}, m.maps...) {
		fmt.Fprintf(&maps, "%x-%x r-xp 00000000 fe:00 1234                       %s\n", addr, addr+0x1000, lib)
		addr += 0x10000
	}
	files["proc/self/maps"] = maps.String()
	for k, v := range m.cgroupFiles {
		files[k] = v
	}
	for rel, content := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if content != "" && !strings.HasSuffix(content, "\n") {
			content += "\n"
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}
