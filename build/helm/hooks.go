package helm

import (
	"fmt"
	"strings"

	"vksfleet.dev/fleet/cli/install"
)

// The chart's own objects, the only ones no base of build/deploy holds: Helm hooks, which have no kustomize
// equivalent. In the replace mode they do to the cluster's own CoreDNS what kubectl mcs join and unjoin do, with the
// kubectl-mcs of our controller's image (build/images): before install and upgrade, a copy of
// the original (`kubectl-mcs dns backup --replace`); after them, once our image runs on every replica, the
// clusterset.local block in the cluster's own Corefile (`dns serve`); before uninstall, the original back
// (`dns restore`), while the objects the chart took over from the cluster, kube-dns first, stay (keptKinds).

// kubectlMCS is where the controller's image holds kubectl-mcs.
const kubectlMCS = "/kubectl-mcs"

// hookName names the hooks' ServiceAccount, Role and RoleBinding, and labels their pods.
const hookName = "mcs-dns-hook"

// hookJob is one hook of the replace mode: the Job name, the Helm hook events it runs on, and kubectl-mcs's
// arguments.
type hookJob struct {
	name, events string
	args         []string
}

// hookJobs are the replace mode's hooks, in the order Helm runs them.
var hookJobs = []hookJob{
	{"mcs-dns-backup", "pre-install,pre-upgrade", []string{"dns", "backup", "--replace"}},
	{"mcs-dns-serve", "post-install,post-upgrade", []string{"dns", "serve"}},
	{"mcs-dns-restore", "pre-delete", []string{"dns", "restore"}},
}

// hookAnnotations are a hook object's: the RBAC (weight -10) before the Jobs (0), each deleted before it is made
// again and once its hooks succeeded. A failed Job stays, for its log.
func hookAnnotations(events, weight string) string {
	return fmt.Sprintf(`  annotations:
    helm.sh/hook: %s
    helm.sh/hook-weight: %q
    helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
`, events, weight)
}

// replaceHooks is the template of the replace mode's hooks; controllerImage is the image name the controller's
// Deployment defaults to, at the chart's appVersion.
func replaceHooks(controllerImage string) string {
	var events []string
	for _, j := range hookJobs {
		events = append(events, j.events)
	}
	rbac := hookAnnotations(strings.Join(events, ","), "-10")
	var b strings.Builder
	fmt.Fprintf(&b, `{{- if eq .Values.dns.mode %q }}
%s# The replace mode's hooks, the chart's own objects (build/helm/hooks.go): kubectl-mcs of the controller's image
# keeps a copy of the cluster's CoreDNS before install and upgrade (ConfigMap kube-system/%s),
# adds the clusterset.local block to the cluster's own Corefile once our image runs on every replica, and puts the
# original back before uninstall.
apiVersion: v1
kind: ServiceAccount
metadata:
  name: %[4]s
  namespace: {{ .Release.Namespace }}
  labels:
    app.kubernetes.io/name: %[4]s
%[5]s---
# Only kube-system's CoreDNS: its ConfigMap and the copy, its Deployment, and its pods' images and metrics.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: %[4]s
  namespace: kube-system
  labels:
    app.kubernetes.io/name: %[4]s
%[5]srules:
  # The copy, and the replace base's Corefile where the cluster has none: RBAC cannot name what is created.
  - apiGroups: [""]
    resources: [configmaps]
    verbs: [create]
  - apiGroups: [""]
    resources: [configmaps]
    resourceNames: [coredns]
    verbs: [get, update, patch]
  - apiGroups: [""]
    resources: [configmaps]
    resourceNames: [%[3]s]
    verbs: [get, update, delete]
  - apiGroups: [apps]
    resources: [deployments]
    resourceNames: [coredns]
    verbs: [get, update]
  - apiGroups: [""]
    resources: [pods]
    verbs: [list]
  - apiGroups: [""]
    resources: [pods/proxy]
    verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: %[4]s
  namespace: kube-system
  labels:
    app.kubernetes.io/name: %[4]s
%[5]sroleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: %[4]s
subjects:
  - kind: ServiceAccount
    name: %[4]s
    namespace: {{ .Release.Namespace }}
`, install.DNSReplace, generated, install.DNSBackup, hookName, rbac)
	for _, j := range hookJobs {
		args := append([]string{kubectlMCS}, j.args...)
		fmt.Fprintf(&b, `---
apiVersion: batch/v1
kind: Job
metadata:
  name: %s
  namespace: {{ .Release.Namespace }}
  labels:
    app.kubernetes.io/name: %[2]s
%[3]sspec:
  backoffLimit: 2
  template:
    metadata:
      labels:
        app.kubernetes.io/name: %[2]s
    spec:
      serviceAccountName: %[2]s
      restartPolicy: Never
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        runAsGroup: 65532
        seccompProfile:
          type: RuntimeDefault
{{- with .Values.nodeSelector }}
      nodeSelector:
{{- toYaml . | nindent 8 }}
{{- end }}
{{- with .Values.tolerations }}
      tolerations:
{{- toYaml . | nindent 6 }}
{{- end }}
      containers:
        - name: kubectl-mcs
          image: {{ .Values.image.controller | default (print %[4]q .Chart.AppVersion) | quote }}
          imagePullPolicy: IfNotPresent
          command: [%[5]s]
          resources:
            requests:
              cpu: 10m
              memory: 32Mi
            limits:
              memory: 128Mi
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities:
              drop: [ALL]
`, j.name, hookName, hookAnnotations(j.events, "0"), controllerImage+":", strings.Join(args, ", "))
	}
	b.WriteString("{{- end }}\n")
	return b.String()
}
