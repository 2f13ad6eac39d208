package daemon

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"ilnp/internal/timeline"
	"ilnp/lab/mipv6/mh"
)

// advert is a Neighbor Advertisement that arrived on the home link.
type advert struct {
	target netip.Addr
	// arrivalNs is the kernel's receive time stamp (SO_TIMESTAMPNS) on CLOCK_MONOTONIC.
	arrivalNs int64
}

// ndSocket is a raw ICMPv6 socket on the home link that passes Neighbor Advertisements only
// (UMIP's ndisc_do_dad listens the same way), with the hop limit and the kernel's arrival
// time of each.
type ndSocket struct{ fd int }

func openNDSocket(ifname string) (*ndSocket, error) {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMPV6)
	if err != nil {
		return nil, fmt.Errorf("neighbor advertisements: raw ICMPv6 socket: %w", err)
	}
	var filter unix.ICMPv6Filter // a set bit blocks the type
	for i := range filter.Data {
		filter.Data[i] = ^uint32(0)
	}
	filter.Data[mh.ICMPv6NeighborAdvert>>5] &^= 1 << (mh.ICMPv6NeighborAdvert & 31)
	steps := []struct {
		what string
		err  func() error
	}{
		{"ICMPv6 filter", func() error { return unix.SetsockoptICMPv6Filter(fd, unix.IPPROTO_ICMPV6, unix.ICMPV6_FILTER, &filter) }},
		{"bind to " + ifname, func() error { return unix.SetsockoptString(fd, unix.SOL_SOCKET, unix.SO_BINDTODEVICE, ifname) }},
		{"hop limits", func() error { return unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVHOPLIMIT, 1) }},
		{"arrival time stamps", func() error { return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1) }},
		// Reads wake up to notice the end of the context.
		{"receive timeout", func() error {
			return unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 200_000})
		}},
	}
	for _, s := range steps {
		if err := s.err(); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("neighbor advertisements: %s: %w", s.what, err)
		}
	}
	return &ndSocket{fd: fd}, nil
}

func (s *ndSocket) Close() error { return unix.Close(s.fd) }

// read hands valid advertisements to out until ctx ends; invalid ones are logged and dropped.
func (s *ndSocket) read(ctx context.Context, out chan<- advert, log *slog.Logger) {
	buf, oob := make([]byte, 1500), make([]byte, 256)
	for ctx.Err() == nil {
		n, oobn, _, _, err := unix.Recvmsg(s.fd, buf, oob, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			if ctx.Err() == nil {
				log.Error("neighbor advertisement socket", "err", err)
			}
			return
		}
		monoNow, realNow := clocks()
		arrival, hop, err := arrivalOf(oob[:oobn], realNow, monoNow)
		if err != nil {
			log.Warn("neighbor advertisement dropped", "err", err)
			continue
		}
		target, err := mh.ParseNeighborAdvert(buf[:n], hop)
		if err != nil {
			log.Warn("neighbor advertisement dropped", "err", err)
			continue
		}
		select {
		case out <- advert{target: target, arrivalNs: arrival}:
		case <-ctx.Done():
			return
		}
	}
}

// clocks reads CLOCK_MONOTONIC and CLOCK_REALTIME back to back.
func clocks() (mono, real int64) {
	mono = timeline.Now()
	return mono, time.Now().UnixNano()
}

// arrivalOf reads the kernel's receive stamp (SO_TIMESTAMPNS: CLOCK_REALTIME) and the hop
// limit out of a received message's control data, and moves the stamp onto the timeline's
// CLOCK_MONOTONIC with the two clocks' offset now (both read at realNow/monoNow).
func arrivalOf(oob []byte, realNow, monoNow int64) (arrivalNs int64, hopLimit int, err error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0, 0, fmt.Errorf("control messages: %w", err)
	}
	hopLimit = -1
	for _, m := range msgs {
		switch {
		case m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= 16:
			sec, nsec := int64(binary.NativeEndian.Uint64(m.Data)), int64(binary.NativeEndian.Uint64(m.Data[8:]))
			arrivalNs = sec*1e9 + nsec - (realNow - monoNow)
		case m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_HOPLIMIT && len(m.Data) >= 4:
			hopLimit = int(int32(binary.NativeEndian.Uint32(m.Data)))
		}
	}
	if arrivalNs == 0 || hopLimit < 0 {
		return 0, 0, errors.New("control messages without arrival time or hop limit")
	}
	return arrivalNs, hopLimit, nil
}
