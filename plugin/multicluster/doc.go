// Package multicluster is the CoreDNS plugin `multicluster`: it serves the clusterset zone (KEP-1645 DNS
// schema 1.0.0) from a zone.Index that a kubesource.Source keeps up to date, and PTR records for clusterset IPs
// and headless endpoint addresses in the reverse zones it is given.
//
// The plugin is registered by importing this package; cmd/coredns places it right after `kubernetes`.
package multicluster
