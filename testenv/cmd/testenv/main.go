// Command testenv starts and stops a real Kubernetes control plane (etcd and
// kube-apiserver, built from the Go module proxy) on loopback, for Convoy's
// end-to-end tests and real-cluster benchmarks. By default `up` also starts
// kube-controller-manager (the controllers of kcmControllers) and KWOK, whose
// stages (testenv/kwok/stages) play the kubelet of every node annotated
// kwok.x-k8s.io/node=fake; --api-only leaves both out.
//
// Every process runs detached from the caller and is recorded by a pid file
// in the state directory, so `up` returns once the API server is ready and
// `down` stops exactly what `up` started. With --owner-pid a small watchdog
// process tears everything down when the owner (a test binary) exits, also
// when it is killed.
//
// Usage:
//
//	testenv up --dir DIR [--api-only] [--owner-pid PID [--remove-dir]]
//	testenv down --dir DIR
//	testenv restart-apiserver --dir DIR
//	testenv kube-scheduler --dir DIR --config FILE [-- extra flags]
//	testenv env --dir DIR
package main

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// readyTimeout bounds how long `up` waits for etcd and the API server.
const readyTimeout = 120 * time.Second

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	cmd, args := os.Args[1], os.Args[2:]
	var err error
	switch cmd {
	case "up":
		err = up(args)
	case "down":
		err = down(args)
	case "restart-apiserver":
		err = restartAPIServer(args)
	case "kube-scheduler":
		err = kubeScheduler(args)
	case "hollow-nodes":
		err = hollowNodes(args)
	case "kueue":
		err = kueue(args)
	case "watch":
		err = watch(args)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv %s: %v\n", cmd, err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage:
  testenv up --dir DIR [--api-only] [--owner-pid PID [--remove-dir]]
  testenv down --dir DIR
  testenv restart-apiserver --dir DIR
  testenv kube-scheduler --dir DIR --config FILE [-- extra kube-scheduler flags]
  testenv hollow-nodes --dir DIR [--count N] [--prefix P] [--extended-resources R=Q,...] [--node-labels K=V,...] [--register-with-taints K=V:E,...] [--max-pods N]
  testenv kueue --dir DIR [--frameworks batch/job,...]`)
	os.Exit(2)
}

// env holds the paths and settings shared by every subcommand.
type env struct {
	dir        string // state directory (absolute)
	binDir     string // directory holding the built binaries (etcd, kube-apiserver, kwok, ...)
	k8sVersion string // the Kubernetes release of those binaries (v1.37.2)
}

// minor is the Kubernetes minor version of the binaries (37 for v1.37.2),
// or 0 when unknown.
func (e *env) minor() int {
	parts := strings.Split(strings.TrimPrefix(e.k8sVersion, "v"), ".")
	if len(parts) < 2 {
		return 0
	}
	m, _ := strconv.Atoi(parts[1])
	return m
}

// repeated is a flag that may be given several times.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, " ") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

func parseCommon(name string, args []string, extra func(*flag.FlagSet)) (*env, *flag.FlagSet, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	dir := fs.String("dir", "", "state directory (required)")
	binDir := fs.String("bin-dir", os.Getenv("TESTENV_BIN_DIR"), "directory with the built binaries")
	if extra != nil {
		extra(fs)
	}
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	if *dir == "" {
		return nil, nil, errors.New("--dir is required")
	}
	if *binDir == "" {
		return nil, nil, errors.New("--bin-dir or TESTENV_BIN_DIR is required (testenv/testenv sets it)")
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return nil, nil, err
	}
	return &env{dir: abs, binDir: *binDir, k8sVersion: os.Getenv("TESTENV_K8S_VERSION")}, fs, nil
}

func (e *env) path(parts ...string) string {
	return filepath.Join(append([]string{e.dir}, parts...)...)
}

func up(args []string) error {
	var owner int
	var removeDir, apiOnly bool
	var stages string
	var extra repeated
	e, _, err := parseCommon("up", args, func(fs *flag.FlagSet) {
		fs.IntVar(&owner, "owner-pid", 0, "tear everything down when this process exits")
		fs.BoolVar(&removeDir, "remove-dir", false, "with --owner-pid: also delete DIR when the owner exits")
		fs.BoolVar(&apiOnly, "api-only", false, "start etcd and kube-apiserver only (no kube-controller-manager, no KWOK)")
		fs.StringVar(&stages, "kwok-stages", os.Getenv("TESTENV_KWOK_STAGES"), "directory of KWOK Stage files (*.yaml)")
		fs.Var(&extra, "apiserver-arg", "an extra kube-apiserver flag (--runtime-config=resource.k8s.io/v1=false); may be repeated")
	})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(e.path("pki"), 0o755); err != nil {
		return err
	}
	if pidAlive(e.path("kube-apiserver.pid")) {
		return fmt.Errorf("a testenv is already running in %s (run down first)", e.dir)
	}
	// Remembered for restart-apiserver, and for testenv/testenv to find the
	// binaries of this control plane's version.
	if err := os.WriteFile(e.path("k8s-version"), []byte(e.k8sVersion), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(e.path("apiserver.args"), []byte(strings.Join(extra, "\n")), 0o644); err != nil {
		return err
	}
	if err := writePKI(e); err != nil {
		return fmt.Errorf("generating certificates: %w", err)
	}
	// A port freePorts found free may be taken again before etcd binds it
	// (another testenv, or an outgoing connection's ephemeral port): etcd
	// then exits at once. Try again with new ports.
	var ports []int
	var etcdClient string
	for attempt := 1; ; attempt++ {
		var err error
		ports, err = freePorts(3)
		if err != nil {
			return err
		}
		etcdClient = fmt.Sprintf("http://127.0.0.1:%d", ports[0])
		etcdPeer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
		etcdArgs := []string{
			"--name=testenv",
			"--data-dir=" + e.path("etcd-data"),
			"--listen-client-urls=" + etcdClient,
			"--advertise-client-urls=" + etcdClient,
			"--listen-peer-urls=" + etcdPeer,
			"--initial-advertise-peer-urls=" + etcdPeer,
			"--initial-cluster=testenv=" + etcdPeer,
			"--unsafe-no-fsync=true",
			"--quota-backend-bytes=8589934592",
			"--log-level=warn",
		}
		if err := start(e, "etcd", etcdArgs); err != nil {
			return err
		}
		err = waitHTTP(e, "etcd", etcdClient+"/health", nil)
		if err == nil {
			break
		}
		if attempt == 3 || pidAlive(e.path("etcd.pid")) {
			return fmt.Errorf("etcd did not become healthy (see %s): %w", e.path("etcd.log"), err)
		}
		fmt.Fprintf(os.Stderr, "testenv up: etcd exited at start (attempt %d: %v); retrying on new ports\n", attempt, err)
		_ = stop(e, "etcd")
		_ = os.RemoveAll(e.path("etcd-data"))
	}
	if err := os.WriteFile(e.path("etcd.url"), []byte(etcdClient), 0o644); err != nil {
		return err
	}
	// The same race as etcd's: the API server exits at once when its port
	// was taken (and the probe may then reach whoever took it: another
	// testenv's API server answers 401 to our token). Try new ports.
	apiPort := ports[2]
	for attempt := 1; ; attempt++ {
		if err := os.WriteFile(e.path("apiserver.port"), []byte(strconv.Itoa(apiPort)), 0o644); err != nil {
			return err
		}
		err := startAPIServer(e)
		if err == nil {
			break
		}
		if attempt == 3 || pidAlive(e.path("kube-apiserver.pid")) {
			return err
		}
		fmt.Fprintf(os.Stderr, "testenv up: kube-apiserver exited at start (attempt %d: %v); retrying on a new port\n", attempt, err)
		_ = stop(e, "kube-apiserver")
		fresh, err := freePorts(1)
		if err != nil {
			return err
		}
		apiPort = fresh[0]
	}
	if err := writeKubeconfig(e, apiPort); err != nil {
		return err
	}
	if !apiOnly {
		if err := startControllers(e, stages); err != nil {
			return err
		}
	}
	if owner > 0 {
		if err := spawnWatchdog(e, owner, removeDir); err != nil {
			return err
		}
	}
	fmt.Println(e.path("kubeconfig"))
	return nil
}

// apiServerArgs are the kube-apiserver flags; they only depend on the state
// directory so a restart brings the same server back on the same port.
func apiServerArgs(e *env) ([]string, error) {
	port, err := os.ReadFile(e.path("apiserver.port"))
	if err != nil {
		return nil, err
	}
	etcd, err := os.ReadFile(e.path("etcd.url"))
	if err != nil {
		return nil, err
	}
	extra, err := os.ReadFile(e.path("apiserver.args"))
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	args := []string{
		"--etcd-servers=" + string(etcd),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + string(port),
		"--cert-dir=" + e.path("pki"),
		"--tls-cert-file=" + e.path("pki", "serving.crt"),
		"--tls-private-key-file=" + e.path("pki", "serving.key"),
		"--service-cluster-ip-range=10.0.0.0/24",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + e.path("pki", "sa.key"),
		"--service-account-signing-key-file=" + e.path("pki", "sa.key"),
		"--token-auth-file=" + e.path("pki", "tokens.csv"),
		"--authorization-mode=RBAC",
		// As upstream scheduler_perf: no controllers run here, so the admission
		// plugins that depend on them are off. Priority stays on so that
		// priorityClassName resolves as on a real cluster.
		"--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		// Benchmarks measure the scheduler, not the server's flow control.
		"--max-requests-inflight=0",
		"--max-mutating-requests-inflight=0",
		"--enable-priority-and-fairness=false",
		"--request-timeout=10m",
	}
	args = append(args, workloadAPIFlags(e)...)
	for _, a := range strings.Split(string(extra), "\n") {
		if a != "" {
			args = append(args, a)
		}
	}
	return args, nil
}

// workloadAPIFlags turn on upstream's PodGroup API (scheduling.k8s.io/v1beta1,
// GenericWorkload) where it exists: Kubernetes 1.37 and later. Older
// versions run with their defaults, as the clusters people run: 1.35's and
// 1.36's alpha Workload APIs stay off. kube-controller-manager gets the same
// gate.
func workloadAPIFlags(e *env) []string {
	if e.minor() < 37 {
		return nil
	}
	return []string{"--runtime-config=scheduling.k8s.io/v1beta1=true", "--feature-gates=GenericWorkload=true"}
}

func startAPIServer(e *env) error {
	args, err := apiServerArgs(e)
	if err != nil {
		return err
	}
	if err := start(e, "kube-apiserver", args); err != nil {
		return err
	}
	port, _ := os.ReadFile(e.path("apiserver.port"))
	if err := waitHTTP(e, "kube-apiserver", "https://127.0.0.1:"+string(port)+"/readyz", readToken(e)); err != nil {
		log := e.path("kube-apiserver.log")
		return fmt.Errorf("kube-apiserver did not become ready (see %s): %w\nlast lines of its log:\n%s", log, err, logTail(log, 15))
	}
	return nil
}

// restartAPIServer stops the API server and starts it again on the same
// port (its clients keep their address). A server that exits at start is
// started again, up to three times, with its log's last lines on stderr:
// the restart tests measure Convoy across a restart, not the server's start.
func restartAPIServer(args []string) error {
	e, _, err := parseCommon("restart-apiserver", args, nil)
	if err != nil {
		return err
	}
	if err := stop(e, "kube-apiserver"); err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		err := startAPIServer(e)
		if err == nil || attempt == 3 || pidAlive(e.path("kube-apiserver.pid")) {
			return err
		}
		fmt.Fprintf(os.Stderr, "testenv restart-apiserver: kube-apiserver exited at start (attempt %d): %v\n", attempt, err)
		_ = stop(e, "kube-apiserver")
		time.Sleep(time.Second)
	}
}

// logTail returns the last n lines of a log file, or a note saying why
// there are none.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func down(args []string) error {
	e, _, err := parseCommon("down", args, nil)
	if err != nil {
		return err
	}
	var errs []error
	// The watchdog first, so it does not race us; then the API server's
	// clients, the API server and finally etcd.
	if err := stop(e, "watchdog"); err != nil {
		errs = append(errs, err)
	}
	if err := stopHollowNodes(e); err != nil {
		errs = append(errs, err)
	}
	for _, name := range []string{"kube-scheduler", "kueue", "kwok", "kube-controller-manager", "kube-apiserver", "etcd"} {
		if err := stop(e, name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func kubeScheduler(args []string) error {
	var config, name string
	e, fs, err := parseCommon("kube-scheduler", args, func(fs *flag.FlagSet) {
		fs.StringVar(&config, "config", "", "KubeSchedulerConfiguration file (required)")
		fs.StringVar(&name, "name", "kube-scheduler", "name of its pid, port and certificate files (several may run)")
	})
	if err != nil {
		return err
	}
	if config == "" {
		return errors.New("--config is required")
	}
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	flags := []string{
		"--config=" + config,
		"--kubeconfig=" + e.path("kubeconfig"),
		"--authentication-kubeconfig=" + e.path("kubeconfig"),
		"--authorization-kubeconfig=" + e.path("kubeconfig"),
		"--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(ports[0]),
		"--cert-dir=" + e.path(name+"-pki"),
	}
	flags = append(flags, fs.Args()...)
	bin := filepath.Join(e.binDir, "kube-scheduler")
	cmd := exec.Command(bin, flags...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	if err := os.WriteFile(e.path(name+".pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(e.path(name+".port"), []byte(strconv.Itoa(ports[0])), 0o644); err != nil {
		return err
	}
	return cmd.Wait()
}

// watch polls the owner process and runs `down` when it is gone.
func watch(args []string) error {
	var owner int
	var removeDir bool
	e, _, err := parseCommon("watch", args, func(fs *flag.FlagSet) {
		fs.IntVar(&owner, "owner-pid", 0, "process to watch")
		fs.BoolVar(&removeDir, "remove-dir", false, "delete DIR after tearing down")
	})
	if err != nil {
		return err
	}
	for processAlive(owner) {
		time.Sleep(200 * time.Millisecond)
	}
	_ = os.Remove(e.path("watchdog.pid")) // down must not kill us mid-way
	err = down([]string{"--dir", e.dir})
	if removeDir {
		_ = os.RemoveAll(e.dir)
	}
	return err
}

func spawnWatchdog(e *env, owner int, removeDir bool) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	args := []string{"watch", "--dir", e.dir, "--owner-pid", strconv.Itoa(owner)}
	if removeDir {
		args = append(args, "--remove-dir")
	}
	return startDetached(e, "watchdog", exe, args)
}

// start launches one of the built binaries detached, logging to DIR/NAME.log.
func start(e *env, name string, args []string) error {
	return startDetached(e, name, filepath.Join(e.binDir, name), args)
}

func startDetached(e *env, name, bin string, args []string) error {
	return startDetachedEnv(e, name, bin, args, nil)
}

// startDetachedEnv is startDetached with extra environment variables
// (KEY=value) on top of ours.
func startDetachedEnv(e *env, name, bin string, args, extraEnv []string) error {
	log, err := os.OpenFile(e.path(name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if extraEnv != nil {
		cmd.Env = append(os.Environ(), extraEnv...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Release()
	return os.WriteFile(e.path(name+".pid"), []byte(strconv.Itoa(pid)), 0o644)
}

// stop terminates the process recorded in DIR/NAME.pid: SIGTERM, then SIGKILL
// after a grace period. A missing pid file or a dead process is not an error.
func stop(e *env, name string) error {
	pidFile := e.path(name + ".pid")
	pid, err := readPid(pidFile)
	if err != nil {
		return nil
	}
	defer os.Remove(pidFile)
	if !processAlive(pid) {
		return nil
	}
	// The pid may name a process group (kube-scheduler) or a session leader.
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if !processAlive(pid) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	time.Sleep(100 * time.Millisecond)
	if processAlive(pid) {
		return fmt.Errorf("%s (pid %d) did not stop", name, pid)
	}
	return nil
}

func readPid(file string) (int, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

func pidAlive(file string) bool {
	pid, err := readPid(file)
	return err == nil && processAlive(pid)
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// freePorts finds n ports free on loopback. They are drawn at random below
// Linux's ephemeral range (32768 and up), so no outgoing connection and no
// test listening on port 0 takes one between this check and the bind of the
// process it is for; only another testenv drawing the same port can, and
// the callers retry when a process exits at start. Nor does it hand out a
// port twice in one run (hollow nodes start many processes that bind late).
func freePorts(n int) ([]int, error) {
	const low, high = 20000, 32768
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries == 1000 {
			return nil, fmt.Errorf("no free port in %d-%d after %d tries", low, high-1, tries)
		}
		offset, err := rand.Int(rand.Reader, big.NewInt(high-low))
		if err != nil {
			return nil, err
		}
		port := low + int(offset.Int64())
		if handedOut[port] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // taken: draw again
		}
		ls = append(ls, l)
		ports = append(ports, port)
		handedOut[port] = true
	}
	return ports, nil
}

// handedOut is every port freePorts returned in this run.
var handedOut = map[int]bool{}

// waitHTTP polls url until it answers 200, and gives up early when the
// process recorded in DIR/NAME.pid has exited.
func waitHTTP(e *env, name, url string, token *string) error {
	client := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
	}
	deadline := time.Now().Add(readyTimeout)
	var last error
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if token != nil {
			req.Header.Set("Authorization", "Bearer "+*token)
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s: HTTP %d", url, resp.StatusCode)
		}
		last = err
		if !pidAlive(e.path(name + ".pid")) {
			return fmt.Errorf("%s exited: %v", name, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("timed out after %s: %v", readyTimeout, last)
}

func readToken(e *env) *string {
	b, err := os.ReadFile(e.path("pki", "token"))
	if err != nil {
		return nil
	}
	t := strings.TrimSpace(string(b))
	return &t
}

// writePKI creates a CA, a serving certificate for 127.0.0.1 and localhost,
// a service-account key and a static admin token. Existing files are kept so
// a second `up` on the same directory (after `down`) reuses them.
func writePKI(e *env) error {
	if _, err := os.Stat(e.path("pki", "tokens.csv")); err == nil {
		return nil
	}
	ca, caKey, caDER, err := newCA(pkix.Name{CommonName: "convoy-testenv-ca"}, nil)
	if err != nil {
		return err
	}
	key, der, err := newServingCert(ca, caKey, "kube-apiserver",
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")})
	if err != nil {
		return err
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	tokenBytes := make([]byte, 16)
	if _, err := rand.Read(tokenBytes); err != nil {
		return err
	}
	token := hex.EncodeToString(tokenBytes)
	files := map[string][]byte{
		"ca.crt":      pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		"serving.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"serving.key": pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
		"sa.key":      pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(saKey)}),
		"token":       []byte(token),
		// token,user,uid,"group": system:masters is cluster-admin via bootstrap RBAC.
		"tokens.csv": []byte(token + ",admin,admin,\"system:masters\"\n"),
	}
	for name, data := range files {
		if err := os.WriteFile(e.path("pki", name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func writeKubeconfig(e *env, port int) error {
	token := readToken(e)
	if token == nil {
		return errors.New("missing admin token")
	}
	caPath := e.path("pki", "ca.crt")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: testenv
  cluster:
    server: https://127.0.0.1:%d
    certificate-authority: %s
users:
- name: admin
  user:
    token: %s
contexts:
- name: testenv
  context:
    cluster: testenv
    user: admin
    namespace: default
current-context: testenv
`, port, caPath, *token)
	return os.WriteFile(e.path("kubeconfig"), []byte(cfg), 0o600)
}

// newCA makes a self-signed CA valid for ten years (and an hour back);
// dnsNames are for a verifier that checks the CA itself by name.
func newCA(subject pkix.Name, dnsNames []string) (*x509.Certificate, *rsa.PrivateKey, []byte, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               subject,
		DNSNames:              dnsNames,
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, err
	}
	ca, err := x509.ParseCertificate(der)
	return ca, key, der, err
}

// newServingCert makes a server certificate signed by ca for dnsNames and
// ips, valid as long as newCA's.
func newServingCert(ca *x509.Certificate, caKey *rsa.PrivateKey, cn string, dnsNames []string, ips []net.IP) (*rsa.PrivateKey, []byte, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    ca.NotBefore,
		NotAfter:     ca.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	return key, der, err
}
