// Package analysis reproduces the control-plane analysis of chapter 6 of the
// ILNPv6 thesis (seed 000): handoff success probability under loss (§6.2,
// eqs. 1-19, Tables 6.1-6.2), handoff delay and interruption time with one
// lost signalling packet (§6.3, eqs. 20-40, Tables 6.3-6.12) and signalling
// overhead at scale (§6.4, eqs. 41-52, Figs. 6.13-6.14).
//
// Beyond the thesis it adds success probability with retransmissions and
// handoff delay under an adaptive (RFC 6298 style) retransmission timeout
// instead of the fixed 1 s Δ_I.
//
// Everything is pure computation except Write, which renders the CSV files,
// PNG plots and the markdown report. The thesis's printed values live in
// thesis.go so tests can hold every formula to the published numbers; where
// a printed number disagrees with its own formula the disagreement is listed
// in Errata rather than fudged.
package analysis
