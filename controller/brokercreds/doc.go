// Package brokercreds keeps the mcs-controller's broker credentials current at run time: it waits for a broker
// kubeconfig (a file or the member's Secret, Source), swaps the credentials under the running controller
// (Transport, which cuts the old credential's connections), and renews ServiceAccount tokens before they expire,
// writing them back where they came from (Keeper). What a credential is and says is package mcs/brokercred's.
package brokercreds
