// Package clusterset starts a local clusterset of real Kubernetes control planes on one machine: one broker API
// server and N member clusters, each an etcd + kube-apiserver started by controller-runtime's envtest plus a
// kube-controller-manager, a virtual Node and a pod lifecycle loop that stands in for the kubelet. Deployments and
// StatefulSets therefore produce real EndpointSlices through the real endpointslice controller.
//
// The binaries come from the tools cache that `make tools` fills (build/tools.sh); FLEET_ASSETS overrides where
// they are looked up, and FLEET_OLDEST_ASSETS where those of the oldest supported release are (Options.Oldest).
package clusterset
