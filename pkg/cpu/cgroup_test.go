package cpu

import "testing"

func TestParseMountinfo(t *testing.T) {
	mi := "22 1 254:0 / / rw - ext4 /dev/vda rw\n" +
		"30 22 0:27 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n" +
		"31 30 0:28 /docker/x /sys/fs/cgroup/cpu,cpuacct rw shared:9 master:2 - cgroup cgroup rw,cpu,cpuacct\n" +
		"40 30 0:37 / /mnt/my\\040cgroup rw - cgroup2 cgroup2 rw\n" +
		"garbage line\n"
	got := parseMountinfo(mi)
	if len(got) != 2 {
		t.Fatalf("got %d cgroup mounts, want 2: %+v", len(got), got)
	}
	if got[0].v2 || !got[0].controllers["cpu"] || !got[0].controllers["cpuacct"] || got[0].root != "/docker/x" || got[0].point != "/sys/fs/cgroup/cpu,cpuacct" {
		t.Errorf("v1 mount %+v", got[0])
	}
	if !got[1].v2 || got[1].point != "/mnt/my cgroup" {
		t.Errorf("v2 mount %+v", got[1])
	}
}

func TestParseProcCgroup(t *testing.T) {
	got := parseProcCgroup("4:cpu,cpuacct:/docker/x\n0::/init.scope\nbad\n")
	if len(got) != 2 || got[0].v2 || !got[0].controllers["cpuacct"] || got[0].path != "/docker/x" || !got[1].v2 || got[1].path != "/init.scope" {
		t.Errorf("parseProcCgroup = %+v", got)
	}
}
