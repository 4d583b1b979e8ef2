package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/lockraft/lockraft"
)

// The manifest's objects, as far as the checks need them.
type (
	meta struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	}
	port struct {
		Name          string `yaml:"name"`
		Port          int    `yaml:"port"`
		ContainerPort int    `yaml:"containerPort"`
		TargetPort    any    `yaml:"targetPort"`
		Protocol      string `yaml:"protocol"`
	}
	probe struct {
		HTTPGet struct {
			Path string `yaml:"path"`
			Port any    `yaml:"port"`
		} `yaml:"httpGet"`
	}
	container struct {
		Name  string   `yaml:"name"`
		Image string   `yaml:"image"`
		Args  []string `yaml:"args"`
		Env   []struct {
			Name      string `yaml:"name"`
			ValueFrom struct {
				FieldRef struct {
					FieldPath string `yaml:"fieldPath"`
				} `yaml:"fieldRef"`
			} `yaml:"valueFrom"`
		} `yaml:"env"`
		Ports          []port `yaml:"ports"`
		LivenessProbe  probe  `yaml:"livenessProbe"`
		ReadinessProbe probe  `yaml:"readinessProbe"`
		VolumeMounts   []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
		} `yaml:"volumeMounts"`
	}
	object struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   meta   `yaml:"metadata"`
		Spec       struct {
			// Service
			ClusterIP                string    `yaml:"clusterIP"`
			PublishNotReadyAddresses bool      `yaml:"publishNotReadyAddresses"`
			Selector                 yaml.Node `yaml:"selector"`
			Ports                    []port    `yaml:"ports"`
			MaxUnavailable           *int      `yaml:"maxUnavailable"`
			MinAvailable             *int      `yaml:"minAvailable"`
			ServiceName              string    `yaml:"serviceName"`
			Replicas                 int       `yaml:"replicas"`
			PodManagementPolicy      string    `yaml:"podManagementPolicy"`
			Template                 struct {
				Metadata meta `yaml:"metadata"`
				Spec     struct {
					ServiceAccountName string      `yaml:"serviceAccountName"`
					Containers         []container `yaml:"containers"`
					Volumes            []volume    `yaml:"volumes"`
				} `yaml:"spec"`
			} `yaml:"template"`
			VolumeClaimTemplates []struct {
				Metadata meta `yaml:"metadata"`
			} `yaml:"volumeClaimTemplates"`
		} `yaml:"spec"`
	}
)

type volume struct {
	Name   string `yaml:"name"`
	Secret *struct {
		SecretName string `yaml:"secretName"`
	} `yaml:"secret"`
	EmptyDir *struct {
		Medium string `yaml:"medium"`
	} `yaml:"emptyDir"`
}

// selector returns a selector's labels: a Service's plain map or a
// matchLabels map.
func selector(n yaml.Node) map[string]string {
	var plain map[string]string
	if n.Decode(&plain) == nil && plain["matchLabels"] == "" {
		return plain
	}
	var ml struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	}
	_ = n.Decode(&ml)
	return ml.MatchLabels
}

// loadRaw returns the manifest's objects of kind as plain maps.
func loadRaw(t *testing.T, kind string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile("lockraft.yaml")
	require.NoError(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var out []map[string]any
	for {
		var o map[string]any
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		if o["kind"] == kind {
			out = append(out, o)
		}
	}
}

func loadManifest(t *testing.T) map[string][]object {
	t.Helper()
	b, err := os.ReadFile("lockraft.yaml")
	require.NoError(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(b))
	byKind := map[string][]object{}
	for {
		var o object
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if o.Kind == "" {
			continue
		}
		byKind[o.Kind] = append(byKind[o.Kind], o)
	}
	return byKind
}

func portNamed(ports []port, name string) port {
	for _, p := range ports {
		if p.Name == name {
			return p
		}
	}
	return port{}
}

// TestManifest (L1 on Kubernetes: probes, quorum kept through disruptions):
// lockraft.yaml parses, and its names, labels, ports, flags and probe paths
// agree with each other, with this binary's flags and defaults, and with the
// admin handler's paths.
func TestManifest(t *testing.T) {
	objs := loadManifest(t)
	require.Len(t, objs["StatefulSet"], 1)
	require.Len(t, objs["Service"], 2)
	require.Len(t, objs["PodDisruptionBudget"], 1)
	require.Len(t, objs["Deployment"], 1)
	sts := objs["StatefulSet"][0]
	pdb := objs["PodDisruptionBudget"][0]
	var headless, client object
	for _, s := range objs["Service"] {
		if s.Spec.ClusterIP == "None" {
			headless = s
		} else {
			client = s
		}
	}
	require.NotEmpty(t, headless.Metadata.Name, "a headless Service")
	require.NotEmpty(t, client.Metadata.Name, "a client Service")

	// Names and labels.
	require.Equal(t, headless.Metadata.Name, sts.Spec.ServiceName, "the StatefulSet's serviceName is the headless Service")
	require.True(t, headless.Spec.PublishNotReadyAddresses, "pods must resolve each other before any is ready")
	require.Equal(t, "Parallel", sts.Spec.PodManagementPolicy, "OrderedReady would wait for pod 0's readiness, which needs the others")
	podLabels := sts.Spec.Template.Metadata.Labels
	require.NotEmpty(t, podLabels)
	for what, sel := range map[string]map[string]string{
		"StatefulSet": selector(sts.Spec.Selector), "headless Service": selector(headless.Spec.Selector),
		"client Service": selector(client.Spec.Selector), "PodDisruptionBudget": selector(pdb.Spec.Selector),
	} {
		require.NotEmpty(t, sel, what)
		for k, v := range sel {
			require.Equal(t, v, podLabels[k], "%s selects pod label %s=%s", what, k, v)
		}
	}

	// The container's flags, parsed by this binary's own flag set.
	require.Len(t, sts.Spec.Template.Spec.Containers, 1)
	ct := sts.Spec.Template.Spec.Containers[0]
	var cfg config
	fs := newFlags(&cfg)
	fs.SetOutput(io.Discard)
	require.NoError(t, fs.Parse(ct.Args), "the container's args are this binary's flags")
	require.Empty(t, fs.Args())
	require.Equal(t, "$(POD_IP)", cfg.podIP)
	env := map[string]string{}
	for _, e := range ct.Env {
		env[e.Name] = e.ValueFrom.FieldRef.FieldPath
	}
	require.Equal(t, "status.podIP", env["POD_IP"])
	require.Equal(t, "metadata.namespace", env["POD_NAMESPACE"])
	require.Equal(t, sts.Spec.Replicas, cfg.expect, "the cluster forms once every replica is seen")
	require.Equal(t, "metadata.name", env["POD_NAME"])
	require.Equal(t, "$(POD_NAME)", cfg.name, "the gossip name is the pod name")
	var pods []string
	for i := range sts.Spec.Replicas {
		pods = append(pods, fmt.Sprintf("%s-%d", sts.Metadata.Name, i))
	}
	require.Equal(t, strings.Join(pods, ","), cfg.founders, "the founders are the StatefulSet's pods")
	require.False(t, cfg.insecure, "members talk TLS")
	require.Empty(t, cfg.tlsDir, "no shared directory of certificates")
	checkPodIdentity(t, sts, cfg, "voter")
	require.Equal(t, fmt.Sprintf("%s.$(POD_NAMESPACE).svc.cluster.local:%d", headless.Metadata.Name, cfg.gossipPort), cfg.seeds,
		"the seed is the headless Service's DNS name on the gossip port")

	// Ports: flags = defaults = containerPorts = Service ports.
	require.Equal(t, defaultGossipPort, cfg.gossipPort)
	require.Equal(t, defaultRaftPort, cfg.raftPort)
	require.Equal(t, fmt.Sprintf(":%d", defaultHTTPPort), cfg.httpAddr)
	require.Equal(t, defaultHTTPPort, portNamed(ct.Ports, "http").ContainerPort)
	require.Equal(t, cfg.raftPort, portNamed(ct.Ports, "raft").ContainerPort)
	require.Equal(t, cfg.raftPort, portNamed(headless.Spec.Ports, "raft").Port)
	for _, name := range []string{"gossip-tcp", "gossip-udp"} {
		require.Equal(t, cfg.gossipPort, portNamed(ct.Ports, name).ContainerPort, name)
		require.Equal(t, cfg.gossipPort, portNamed(headless.Spec.Ports, name).Port, name)
	}
	require.Equal(t, "UDP", portNamed(headless.Spec.Ports, "gossip-udp").Protocol, "memberlist probes over UDP")
	require.Equal(t, "http", portNamed(client.Spec.Ports, "http").TargetPort)
	require.Equal(t, fmt.Sprintf(":%d", defaultAdminPort), cfg.adminAddr)
	require.Equal(t, defaultAdminPort, portNamed(ct.Ports, "admin").ContainerPort)
	for _, svc := range objs["Service"] {
		for _, p := range svc.Spec.Ports {
			require.NotEqual(t, "admin", p.TargetPort, "%s exposes the admin port", svc.Metadata.Name)
			require.NotEqual(t, defaultAdminPort, p.Port, "%s exposes the admin port", svc.Metadata.Name)
			require.NotEqual(t, defaultAdminPort, p.TargetPort, "%s exposes the admin port", svc.Metadata.Name)
		}
	}

	// Probes on the admin handler's paths, as main.go mounts it.
	require.Equal(t, adminPrefix+lockraft.AdminHealthPath, ct.LivenessProbe.HTTPGet.Path)
	require.Equal(t, adminPrefix+lockraft.AdminReadyPath, ct.ReadinessProbe.HTTPGet.Path)
	require.Equal(t, "admin", ct.LivenessProbe.HTTPGet.Port, "probes on the admin port")
	require.Equal(t, "admin", ct.ReadinessProbe.HTTPGet.Port, "probes on the admin port")

	// Data on the claim's volume.
	require.Len(t, sts.Spec.VolumeClaimTemplates, 1)
	claim := sts.Spec.VolumeClaimTemplates[0].Metadata.Name
	mounted := false
	for _, vm := range ct.VolumeMounts {
		if vm.Name == claim {
			require.Equal(t, vm.MountPath+"/data", cfg.dataDir, "the data directory is below the mount, which -rejoin-when-removed cannot delete")
			require.Equal(t, vm.MountPath+"/member-id", cfg.idFile, "a voter keeps its id on its volume")
			mounted = true
		}
	}
	require.True(t, mounted, "the data directory is on the volume claim")
	require.True(t, cfg.rejoin, "a removed voter's pod rejoins as a new member by itself")
	require.Equal(t, defaultDataDir, cfg.dataDir)

	// The budget keeps a quorum of voters up.
	quorum := sts.Spec.Replicas/2 + 1
	switch {
	case pdb.Spec.MaxUnavailable != nil:
		require.LessOrEqual(t, sts.Spec.Replicas-*pdb.Spec.MaxUnavailable, sts.Spec.Replicas)
		require.GreaterOrEqual(t, sts.Spec.Replicas-*pdb.Spec.MaxUnavailable, quorum)
	case pdb.Spec.MinAvailable != nil:
		require.GreaterOrEqual(t, *pdb.Spec.MinAvailable, quorum)
	default:
		t.Fatal("the PodDisruptionBudget sets neither maxUnavailable nor minAvailable")
	}
	require.True(t, strings.HasSuffix(ct.Image, ":"+lockraft.Version), "the image tag is the release version")

	// Light members: the same service, role light, selected by no voter's
	// StatefulSet or budget.
	light := objs["Deployment"][0]
	require.Len(t, light.Spec.Template.Spec.Containers, 1)
	lct := light.Spec.Template.Spec.Containers[0]
	var lcfg config
	lfs := newFlags(&lcfg)
	lfs.SetOutput(io.Discard)
	require.NoError(t, lfs.Parse(lct.Args))
	checkPodIdentity(t, light, lcfg, "light")
	require.Equal(t, cfg.founders, lcfg.founders)
	require.Equal(t, cfg.seeds, lcfg.seeds)
	require.Equal(t, cfg.cluster, lcfg.cluster)
	require.Equal(t, "admin", lct.ReadinessProbe.HTTPGet.Port)
	for k, v := range selector(sts.Spec.Selector) {
		if light.Spec.Template.Metadata.Labels[k] != v {
			return
		}
	}
	t.Fatal("the StatefulSet's selector also selects the light members")
}

// checkPodIdentity: the pod makes its own key and has a certificate of its
// role signed (-identity cert-manager), into a memory-backed volume of its
// own; it mounts no Secret but the gossip key's; its ServiceAccount may use
// only its role's CertificateRequestPolicy, which allows only that role's
// URI of this cluster.
func checkPodIdentity(t *testing.T, o object, cfg config, role string) {
	t.Helper()
	ct := o.Spec.Template.Spec.Containers[0]
	require.Equal(t, "cert-manager", cfg.identity, o.Metadata.Name)
	require.Equal(t, role, cfg.role, o.Metadata.Name)
	require.NotEmpty(t, cfg.gossipKey)
	sa := o.Spec.Template.Spec.ServiceAccountName
	require.Equal(t, "lockraft-"+role, sa, "one ServiceAccount per role")
	mountOf := map[string]string{}
	for _, vm := range ct.VolumeMounts {
		mountOf[vm.Name] = vm.MountPath
	}
	for _, v := range o.Spec.Template.Spec.Volumes {
		switch {
		case v.Secret != nil:
			require.Equal(t, "lockraft-example-gossip", v.Secret.SecretName, "%s: the only Secret a pod mounts is the gossip key", o.Metadata.Name)
			require.Equal(t, mountOf[v.Name], strings.TrimSuffix(cfg.gossipKey, "/gossip.key"))
		case mountOf[v.Name] == cfg.certDir:
			require.NotNil(t, v.EmptyDir, "%s: the pod's key is in a volume of its own", o.Metadata.Name)
			require.Equal(t, "Memory", v.EmptyDir.Medium, "%s: the pod's key never reaches a disk", o.Metadata.Name)
		}
	}
	require.NotEmpty(t, mountOf, o.Metadata.Name)
	var certMount bool
	for _, p := range mountOf {
		certMount = certMount || p == cfg.certDir
	}
	require.True(t, certMount, "%s: -cert-dir is a mounted volume", o.Metadata.Name)

	// The Issuer named, and the policy this ServiceAccount may use.
	var issuerOK bool
	for _, is := range loadRaw(t, "Issuer") {
		issuerOK = issuerOK || is["metadata"].(map[string]any)["name"] == cfg.issuer
	}
	require.True(t, issuerOK, "-issuer names the manifest's Issuer")
	usable := map[string]bool{} // policies sa may use
	roles := map[string][]string{}
	for _, r := range loadRaw(t, "Role") {
		for _, rule := range r["rules"].([]any) {
			rm := rule.(map[string]any)
			if fmt.Sprint(rm["resources"]) == "[certificaterequestpolicies]" && fmt.Sprint(rm["verbs"]) == "[use]" {
				for _, n := range rm["resourceNames"].([]any) {
					roles[r["metadata"].(map[string]any)["name"].(string)] = append(roles[r["metadata"].(map[string]any)["name"].(string)], n.(string))
				}
			}
		}
	}
	for _, rb := range loadRaw(t, "RoleBinding") {
		for _, sub := range rb["subjects"].([]any) {
			if sub.(map[string]any)["name"] == sa {
				for _, p := range roles[rb["roleRef"].(map[string]any)["name"].(string)] {
					usable[p] = true
				}
			}
		}
	}
	require.Len(t, usable, 1, "%s may use one policy", sa)
	for _, pol := range loadRaw(t, "CertificateRequestPolicy") {
		if !usable[pol["metadata"].(map[string]any)["name"].(string)] {
			continue
		}
		uris := pol["spec"].(map[string]any)["allowed"].(map[string]any)["uris"].(map[string]any)
		require.Equal(t, []any{fmt.Sprintf("lockraft://%s/*?role=%s", cfg.cluster, role)}, uris["values"], "%s's policy", sa)
		require.Equal(t, true, uris["required"])
		require.Equal(t, cfg.issuer, pol["spec"].(map[string]any)["selector"].(map[string]any)["issuerRef"].(map[string]any)["name"])
	}
}
