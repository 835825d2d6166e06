// Package kubesource feeds a zone.Index from one cluster's Kubernetes API: ServiceImports (v1beta1, or
// v1alpha1 on servers that lack it), the imported EndpointSlices (those labelled
// multicluster.kubernetes.io/service-name) and Namespaces. Informers keep slim objects; every change marks its
// service dirty, and one worker rebuilds the dirty services' index entries in batches.
package kubesource
