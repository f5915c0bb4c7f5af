package main

// Hollow nodes: kubemark's hollow kubelet (k8s.io/kubernetes/cmd/kubemark,
// --morph=kubelet), the real kubelet with a fake container runtime,
// cAdvisor and container manager. Unlike KWOK's nodes, these admit pods as
// a real node does: a pod that does not fit (resources, extended resources
// included; taints; node affinity; host ports) is rejected with the
// kubelet's own reason (OutOfcpu, OutOfnvidia.com/gpu, NodeAffinity, ...),
// phase Failed. Their CPU and memory are kubemark's fixed fake machine:
// 1 CPU, 3.75 GiB (cAdvisor's fake MachineInfo); pods and extended
// resources are set by flags.

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// hollowPrefix names the pid and log files of hollow nodes in DIR.
const hollowPrefix = "hollow-node-"

func hollowNodes(args []string) error {
	var count, maxPods int
	var prefix, extended, labels, taints string
	e, _, err := parseCommon("hollow-nodes", args, func(fs *flag.FlagSet) {
		fs.IntVar(&count, "count", 1, "how many hollow nodes to start")
		fs.StringVar(&prefix, "prefix", "hollow-", "node names are PREFIX0, PREFIX1, ...")
		fs.IntVar(&maxPods, "max-pods", 110, "the nodes' pod capacity")
		fs.StringVar(&extended, "extended-resources", "", "extended resources of each node (nvidia.com/gpu=8,...)")
		fs.StringVar(&labels, "node-labels", "", "labels of each node (k=v,...)")
		fs.StringVar(&taints, "register-with-taints", "", "taints of each node (key=value:Effect,...)")
	})
	if err != nil {
		return err
	}
	if !pidAlive(e.path("kube-apiserver.pid")) {
		return fmt.Errorf("no control plane runs in %s (run up first)", e.dir)
	}
	bin := filepath.Join(e.binDir, "kubemark")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%s: hollow nodes need kubemark, which testenv builds with the newest Kubernetes version only (testenv/testenv build --hollow-nodes): %w", bin, err)
	}
	for i := 0; i < count; i++ {
		name := prefix + strconv.Itoa(i)
		if err := startHollowNode(e, bin, name, maxPods, extended, labels, taints); err != nil {
			return err
		}
		fmt.Println(name)
	}
	return nil
}

func startHollowNode(e *env, bin, name string, maxPods int, extended, labels, taints string) error {
	if pidAlive(e.path(hollowPrefix + name + ".pid")) {
		return fmt.Errorf("hollow node %s already runs", name)
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	// What else it writes goes to DIR/hollow/NAME when it honours $TMPDIR;
	// its root directory and runtime sockets go to /tmp regardless, and
	// stopHollowNodes removes them.
	tmp := e.path("hollow", name)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	args := []string{
		"--morph=kubelet",
		"--name=" + name,
		"--kubeconfig=" + e.path("kubeconfig"),
		"--kubelet-port=" + strconv.Itoa(ports[0]),
		"--kubelet-read-only-port=" + strconv.Itoa(ports[1]),
		"--max-pods=" + strconv.Itoa(maxPods),
		// No containerd here: the fake image service.
		"--use-host-image-service=false",
		"--kube-api-content-type=application/vnd.kubernetes.protobuf",
		"--kube-api-qps=50",
		"--kube-api-burst=100",
		"--v=1",
	}
	if extended != "" {
		args = append(args, "--extended-resources="+extended)
	}
	if labels != "" {
		args = append(args, "--node-labels="+labels)
	}
	if taints != "" {
		args = append(args, "--register-with-taints="+taints)
	}
	return startDetachedEnv(e, hollowPrefix+name, bin, args, []string{"TMPDIR=" + tmp})
}

// stopHollowNodes stops every hollow node started in DIR and removes what
// each left outside DIR: the hollow kubelet makes its root directory under
// /tmp whatever $TMPDIR says (kubemark's MakeTempDirOrDie), and its fake
// runtime listens on a socket right under /tmp.
func stopHollowNodes(e *env) error {
	pids, err := filepath.Glob(e.path(hollowPrefix + "*.pid"))
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range pids {
		name := strings.TrimSuffix(filepath.Base(p), ".pid")
		var litter []string
		if pid, err := readPid(p); err == nil {
			litter = append(litter, unixSocketsOf(pid)...)
		}
		litter = append(litter, rootDirIn(e.path(name+".log"))...)
		if err := stop(e, name); err != nil {
			errs = append(errs, err)
		}
		for _, path := range litter {
			_ = os.RemoveAll(path)
		}
	}
	return errors.Join(errs...)
}

// rootDirIn finds the root directory a hollow kubelet logged ("Using
// /tmp/hollow-kubelet.123 as root dir for hollow-kubelet").
func rootDirIn(logFile string) []string {
	b, err := os.ReadFile(logFile)
	if err != nil {
		return nil
	}
	var dirs []string
	for _, line := range strings.Split(string(b), "\n") {
		i := strings.Index(line, "Using ")
		j := strings.Index(line, " as root dir for hollow-kubelet")
		if i >= 0 && j > i+6 {
			dir := line[i+6 : j]
			if strings.HasPrefix(filepath.Base(dir), "hollow-kubelet.") {
				dirs = append(dirs, dir)
			}
		}
	}
	return dirs
}

// unixSocketsOf lists the paths of the unix sockets process pid holds open
// right under /tmp (its fake runtime's and image service's endpoints, named
// by a random number or kubelet_remote_<n>.sock); those under its root
// directory go with it.
func unixSocketsOf(pid int) []string {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return nil
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(target, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]")] = true
		}
	}
	table, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		return nil
	}
	var paths []string
	for _, line := range strings.Split(string(table), "\n") {
		f := strings.Fields(line)
		// Num RefCount Protocol Flags Type St Inode Path
		if len(f) >= 8 && inodes[f[6]] && filepath.Dir(f[7]) == "/tmp" {
			paths = append(paths, f[7])
		}
	}
	return paths
}
