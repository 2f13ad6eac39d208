// Package pcapfile writes classic libpcap files (little-endian, microsecond timestamps) of
// packets built in memory, for tests that have an independent decoder such as tshark read
// them.
package pcapfile

import (
	"encoding/binary"
	"time"
)

// Link types (www.tcpdump.org/linktypes.html).
const (
	// LinkRaw is LINKTYPE_RAW: packets start with the IP header.
	LinkRaw = 101
	// LinkIPv6 is LINKTYPE_IPV6: raw IPv6 packets, no link header.
	LinkIPv6 = 229
)

// epoch is when the first packet of a file is stamped (a fixed time keeps files identical
// from run to run).
const epoch = 1_700_000_000

// Bytes returns a pcap file of linkType (snap length 65535) holding pkts, packet i stamped
// step*i after a fixed epoch.
func Bytes(linkType uint32, step time.Duration, pkts ...[]byte) []byte {
	le := binary.LittleEndian
	b := le.AppendUint32(nil, 0xa1b2c3d4)
	b = le.AppendUint16(b, 2) // version 2.4
	b = le.AppendUint16(b, 4)
	b = le.AppendUint32(b, 0) // thiszone
	b = le.AppendUint32(b, 0) // sigfigs
	b = le.AppendUint32(b, 65535)
	b = le.AppendUint32(b, linkType)
	for i, p := range pkts {
		us := time.Duration(i) * step / time.Microsecond
		b = le.AppendUint32(b, epoch+uint32(us/1_000_000))
		b = le.AppendUint32(b, uint32(us%1_000_000))
		b = le.AppendUint32(b, uint32(len(p)))
		b = le.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
	}
	return b
}
