// Package wire holds the ILNPv6 wire formats (RFC 6740-6744): identifiers
// and locators, the Nonce destination option, the ICMPv6 Locator Update,
// Internet checksums, a minimal IPv6 header, hosts-file I-LV entries and the
// DNS NID/L64/L32/LP records.
//
// The package is pure: it does no I/O beyond reading an io.Reader handed to
// it and keeps no global state. Every parser returns an error for bad input
// and never panics.
package wire
