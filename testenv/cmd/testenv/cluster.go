package main

// What turns the bare API server into a cluster that behaves like one:
// kube-controller-manager with an explicit list of controllers, and KWOK
// playing the kubelet of the nodes that ask for it. Both use the admin
// kubeconfig; docs/testing.md says what is still missing.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// kcmControllers is everything kube-controller-manager runs (--controllers
// without "*" enables only what it names). Node lifecycle and taint eviction
// are left out on purpose: tests create Node objects no kubelet heartbeats,
// and those controllers would taint them and evict their pods. No cloud
// provider, no node IPAM, no endpoints, no podgc (it deletes pods bound to
// nodes that do not exist, and tests bind pods to any node name).
var kcmControllers = []string{
	"disruption-controller",                       // PodDisruptionBudget status (disruptionsAllowed)
	"garbage-collector-controller",                // owner references: cascading deletion
	"replicaset-controller",                       // ReplicaSets create and delete pods
	"deployment-controller",                       // Deployments roll out ReplicaSets
	"statefulset-controller",                      // StatefulSets create pods in order
	"job-controller",                              // Jobs create pods (KWOK never completes them)
	"namespace-controller",                        // a deleted namespace empties and goes away
	"persistentvolume-binder-controller",          // PVCs bind to PVs
	"persistentvolumeclaim-protection-controller", // lifts the pvc-protection finalizer the admission plugin adds, so PVCs (and their namespace) can go
	"persistentvolume-protection-controller",      // same for PVs
	"resourceclaim-controller",                    // claims from pods' ResourceClaimTemplates (pod.status.resourceClaimStatuses); drops gone pods from reservedFor, deallocates unused claims
	"serviceaccount-controller",                   // the "default" ServiceAccount of each namespace
	"serviceaccount-token-controller",             // legacy token Secrets, signed with the API server's service-account key
}

// kwokNodeSelector is the annotation that hands a Node to KWOK, as in
// KWOK's own documentation. Nodes without it are left alone.
const kwokNodeSelector = "kwok.x-k8s.io/node=fake"

// startControllers starts kube-controller-manager and KWOK against the API
// server of e and waits until both serve /healthz.
func startControllers(e *env, stagesDir string) error {
	stages, err := stageFiles(stagesDir)
	if err != nil {
		return err
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	kubeconfig := e.path("kubeconfig")
	kcm := []string{
		"--kubeconfig=" + kubeconfig,
		"--controllers=" + strings.Join(kcmControllers, ","),
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(ports[0]),
		"--cert-dir=" + e.path("kube-controller-manager-pki"),
		// The key the API server verifies service-account tokens with.
		"--service-account-private-key-file=" + e.path("pki", "sa.key"),
		"--root-ca-file=" + e.path("pki", "ca.crt"),
		// Tests create pods by the hundred through ReplicaSets and Jobs, and
		// benchmarks thousands of ResourceClaims through the resourceclaim
		// controller; the defaults (20/30) would pace them. 5000 as
		// scheduler_perf's clients, so the controllers are not what a
		// benchmark measures.
		"--kube-api-qps=5000",
		"--kube-api-burst=5000",
	}
	// As the API server (workloadAPIFlags).
	if e.minor() >= 37 {
		kcm = append(kcm, "--feature-gates=GenericWorkload=true")
	}
	if err := start(e, "kube-controller-manager", kcm); err != nil {
		return err
	}
	kwok := []string{
		"--kubeconfig=" + kubeconfig,
		"--manage-nodes-with-annotation-selector=" + kwokNodeSelector,
		// As a kubelet: a Lease in kube-node-lease, renewed every 10 s.
		"--node-lease-duration-seconds=40",
		// Pod IPs; big enough never to run out (KWOK does not bound-check).
		"--cidr=10.244.0.0/16",
		"--node-ip=127.0.0.1",
		"--server-address=127.0.0.1:" + strconv.Itoa(ports[1]),
	}
	for _, f := range stages {
		kwok = append(kwok, "--config="+f)
	}
	// KWOK also reads ~/.kwok/kwok.yaml when it exists: give it a home of
	// its own so the machine's file cannot change the stages.
	home := e.path("kwok-home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		return err
	}
	if err := startDetachedEnv(e, "kwok", filepath.Join(e.binDir, "kwok"), kwok, []string{"HOME=" + home}); err != nil {
		return err
	}
	if err := waitHTTP(e, "kube-controller-manager", "https://127.0.0.1:"+strconv.Itoa(ports[0])+"/healthz", nil); err != nil {
		return fmt.Errorf("kube-controller-manager did not become healthy (see %s): %w", e.path("kube-controller-manager.log"), err)
	}
	if err := waitHTTP(e, "kwok", "http://127.0.0.1:"+strconv.Itoa(ports[1])+"/healthz", nil); err != nil {
		return fmt.Errorf("kwok did not become healthy (see %s): %w", e.path("kwok.log"), err)
	}
	return nil
}

// stageFiles lists the Stage files KWOK is started with, in name order.
func stageFiles(dir string) ([]string, error) {
	if dir == "" {
		return nil, errors.New("no KWOK stages: pass --kwok-stages or set TESTENV_KWOK_STAGES (testenv/testenv does)")
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no KWOK stages (*.yaml) in %s", dir)
	}
	sort.Strings(files)
	return files, nil
}
