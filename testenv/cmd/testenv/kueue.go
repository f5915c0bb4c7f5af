package main

// Kueue (sigs.k8s.io/kueue's controller manager, built by testenv/testenv
// build from testenv/kueue) beside a running control plane, installed as its
// release manifests install it (CRDs with their conversion webhooks, the
// mutating and validating webhooks, internal certificate management), with
// one change a bare control plane needs: there is no Service to route to, so
// every webhook's clientConfig.service becomes a url on 127.0.0.1.
//
// Kueue's certificate rotator would make a certificate for
// kueue-webhook-service.kueue-system.svc only, which that url cannot match.
// So its Secret is written here first, with a CA of its own and a serving
// certificate for both that name and 127.0.0.1: the rotator finds it valid,
// keeps it and injects the CA into the webhooks and CRDs, as it does in a
// cluster. Its files are written to the certificate directory, where a
// kubelet would mount the Secret. Leader election, metrics
// and the visibility server are off; everything else is Kueue's defaults,
// Topology-Aware Scheduling included (beta, on by default).

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// kueueNamespace is where Kueue runs and keeps its own objects.
const kueueNamespace = "kueue-system"

func kueue(args []string) error {
	var frameworks string
	e, _, err := parseCommon("kueue", args, func(fs *flag.FlagSet) {
		fs.StringVar(&frameworks, "frameworks", "batch/job", "the integrations Kueue manages (integrations.frameworks), comma-separated")
	})
	if err != nil {
		return err
	}
	if !pidAlive(e.path("kube-apiserver.pid")) {
		return fmt.Errorf("no control plane runs in %s (run up first)", e.dir)
	}
	if pidAlive(e.path("kueue.pid")) {
		return errors.New("kueue already runs")
	}
	bin := filepath.Join(e.binDir, "kueue")
	manifests := filepath.Join(e.binDir, "kueue-config")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%s: Kueue is built by testenv/testenv build with the newest Kubernetes version only: %w", bin, err)
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	webhookPort, healthPort := ports[0], ports[1]
	webhookURL := fmt.Sprintf("https://127.0.0.1:%d", webhookPort)
	pki, err := webhookPKI()
	if err != nil {
		return fmt.Errorf("generating Kueue's webhook certificate: %w", err)
	}
	crds, err := filepath.Glob(filepath.Join(manifests, "crd", "*.yaml"))
	if err != nil || len(crds) == 0 {
		return fmt.Errorf("no Kueue CRDs in %s (testenv/testenv build copies them)", filepath.Join(manifests, "crd"))
	}
	objects, err := readManifests(e, crds...)
	if err != nil {
		return err
	}
	for _, crd := range objects {
		name := nested[string](crd, "metadata", "name")
		if converted[name] {
			spec, _ := crd["spec"].(map[string]any)
			spec["conversion"] = map[string]any{
				"strategy": "Webhook",
				"webhook": map[string]any{
					"conversionReviewVersions": []any{"v1"},
					"clientConfig":             map[string]any{"url": webhookURL + "/convert", "caBundle": base64.StdEncoding.EncodeToString(pki.caCert)},
				},
			}
		}
	}
	if err := apply(e, "kueue-crds.json", objects, "--server-side"); err != nil {
		return err
	}
	if _, err := kubectl(e, "wait", "--for=condition=Established", "--timeout=60s", "-f", filepath.Join(manifests, "crd")); err != nil {
		return err
	}
	secret := map[string]any{
		"apiVersion": "v1",
		"kind":       "Secret",
		"metadata":   map[string]any{"name": "kueue-webhook-server-cert", "namespace": kueueNamespace},
		"data": map[string]any{
			"ca.crt":  pki.caCert,
			"ca.key":  pki.caKey,
			"tls.crt": pki.cert,
			"tls.key": pki.key,
		},
	}
	namespace := map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": kueueNamespace}}
	if err := apply(e, "kueue-secret.json", []map[string]any{namespace, secret}); err != nil {
		return err
	}
	// In a cluster the kubelet mounts the Secret there; the rotator only
	// waits for the files.
	certDir := e.path("kueue-pki")
	if err := os.MkdirAll(certDir, 0o755); err != nil {
		return err
	}
	for name, data := range map[string][]byte{"tls.crt": pki.cert, "tls.key": pki.key, "ca.crt": pki.caCert} {
		if err := os.WriteFile(filepath.Join(certDir, name), data, 0o600); err != nil {
			return err
		}
	}
	webhooks, err := readManifests(e, filepath.Join(manifests, "webhook.yaml"))
	if err != nil {
		return err
	}
	if err := pointWebhooksAt(webhooks, webhookURL, pki.caCert); err != nil {
		return err
	}
	if err := apply(e, "kueue-webhooks.json", webhooks); err != nil {
		return err
	}
	config := fmt.Sprintf(`apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: %s
health:
  healthProbeBindAddress: 127.0.0.1:%d
metrics:
  bindAddress: "0"
webhook:
  host: 127.0.0.1
  port: %d
  certDir: %s
leaderElection:
  leaderElect: false
featureGates:
  VisibilityOnDemand: false
integrations:
  frameworks: [%s]
`, kueueNamespace, healthPort, webhookPort, certDir, frameworks)
	configFile := e.path("kueue.yaml")
	if err := os.WriteFile(configFile, []byte(config), 0o644); err != nil {
		return err
	}
	if err := startDetachedEnv(e, "kueue", bin, []string{"--config=" + configFile},
		[]string{"KUBECONFIG=" + e.path("kubeconfig")}); err != nil {
		return err
	}
	if err := waitHTTP(e, "kueue", "http://127.0.0.1:"+strconv.Itoa(healthPort)+"/readyz", nil); err != nil {
		return fmt.Errorf("kueue did not become ready (see %s): %w", e.path("kueue.log"), err)
	}
	fmt.Println(e.path("kueue.log"))
	return nil
}

// converted are the CRDs whose conversion webhook Kueue's release
// manifests configure and its certificate rotator injects its CA into
// (pkg/util/cert/cert.go).
var converted = map[string]bool{
	"localqueues.kueue.x-k8s.io":        true,
	"clusterqueues.kueue.x-k8s.io":      true,
	"workloads.kueue.x-k8s.io":          true,
	"cohorts.kueue.x-k8s.io":            true,
	"multikueueclusters.kueue.x-k8s.io": true,
}

// nested reads a field of a decoded object, or T's zero value.
func nested[T any](obj map[string]any, path ...string) T {
	var cur any = obj
	for _, p := range path {
		m, _ := cur.(map[string]any)
		cur = m[p]
	}
	v, _ := cur.(T)
	return v
}

// apply writes objects to DIR/file as a List and applies it.
func apply(e *env, file string, objects []map[string]any, flags ...string) error {
	data, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": objects})
	if err != nil {
		return err
	}
	if err := os.WriteFile(e.path(file), data, 0o644); err != nil {
		return err
	}
	_, err = kubectl(e, append(append([]string{"apply"}, flags...), "-f", e.path(file))...)
	return err
}

// kubectl runs the control plane's kubectl and returns its output.
func kubectl(e *env, args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(e.binDir, "kubectl"), append([]string{"--kubeconfig=" + e.path("kubeconfig")}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

// readManifests decodes YAML files of one or more documents, with
// kubectl (which the control plane has) rather than a YAML library.
func readManifests(e *env, files ...string) ([]map[string]any, error) {
	var items []map[string]any
	for _, file := range files {
		cmd := exec.Command(filepath.Join(e.binDir, "kubectl"), "--kubeconfig="+e.path("kubeconfig"),
			"create", "--dry-run=client", "-o", "json", "-f", file)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w: %s", file, err, stderr.String())
		}
		// One JSON object per document, one after the other.
		dec := json.NewDecoder(strings.NewReader(string(out)))
		for dec.More() {
			var item map[string]any
			if err := dec.Decode(&item); err != nil {
				return nil, fmt.Errorf("reading %s: %w", file, err)
			}
			items = append(items, item)
		}
	}
	return items, nil
}

// pointWebhooksAt points every webhook of Kueue's webhook configurations at
// url (plus its path) with ca as its bundle, and names the configurations as
// Kueue's release manifests do (kueue-<name>), the names its certificate
// rotator looks for.
func pointWebhooksAt(configs []map[string]any, url string, ca []byte) error {
	count := 0
	for _, item := range configs {
		meta, _ := item["metadata"].(map[string]any)
		if meta == nil {
			return errors.New("a webhook configuration without metadata")
		}
		meta["name"] = "kueue-" + fmt.Sprint(meta["name"])
		hooks, _ := item["webhooks"].([]any)
		for _, h := range hooks {
			hook, _ := h.(map[string]any)
			path := nested[string](hook, "clientConfig", "service", "path")
			if path == "" {
				return fmt.Errorf("webhook %v has no service path", hook["name"])
			}
			hook["clientConfig"] = map[string]any{"url": url + path, "caBundle": base64.StdEncoding.EncodeToString(ca)}
			count++
		}
	}
	if count == 0 {
		return errors.New("Kueue's webhook manifests have no webhooks")
	}
	return nil
}

// kueuePKI is the content of Kueue's webhook Secret, PEM-encoded.
type kueuePKI struct {
	caCert, caKey, cert, key []byte
}

// webhookPKI makes a CA as Kueue's certificate rotator makes one (named
// kueue-ca, which it checks) and a serving certificate signed by it for
// the webhook Service's name and 127.0.0.1.
func webhookPKI() (*kueuePKI, error) {
	ca, caKey, caDER, err := newCA(pkix.Name{CommonName: "kueue-ca", Organization: []string{"kueue"}}, []string{"kueue-ca"})
	if err != nil {
		return nil, err
	}
	service := "kueue-webhook-service." + kueueNamespace + ".svc"
	key, der, err := newServingCert(ca, caKey, service, []string{service}, []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		return nil, err
	}
	return &kueuePKI{
		caCert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		caKey:  pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(caKey)}),
		cert:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:    pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
	}, nil
}
