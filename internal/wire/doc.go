// Package wire holds the ILNPv6 wire formats (RFC 6740-6744): identifiers
// and locators (NID, L64, ILV), the Nonce destination option, the ICMPv6
// Locator Update, Internet checksums, a minimal IPv6 header and packet
// walker with builders for test packets, hosts-file I-LV entries and the DNS
// NID/L64/L32/LP records (via github.com/miekg/dns).
//
// The package is pure: it does no I/O beyond reading an io.Reader handed to
// it and keeps no global state. Every parser returns an error for bad input
// and never panics; each has a fuzz target.
//
// Preferences follow RFC 6742 everywhere (DNS records, Locator Update
// entries, hosts-file entries): a lower value is more preferred.
package wire
