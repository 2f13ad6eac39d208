package attack

import (
	"context"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"

	"ilnp/internal/wire"
)

// newcomerAnswered plays a new ILNP correspondent behind R1: [atkPrefix : nid] sends the CN an
// Echo Request with its own nonce n and waits up to 1 s for the CN's Echo Reply on atk's
// interface (the reply carries the CN's nonce option, which atk's kernel discards: a packet
// socket sees it first). The address is on atk's interface for the time of the try so that R1's
// neighbour discovery finds it.
func (l *labRun) newcomerAnswered(ctx context.Context, nid wire.NID, n wire.Nonce, seq uint16) (bool, error) {
	loc, err := wire.ParseL64(atkPrefix)
	if err != nil {
		return false, err
	}
	me := wire.ILV{Locator: loc, NID: nid}
	if _, err := l.atk.Run("ip", "addr", "add", me.Addr().String()+"/128", "dev", "atk-r1", "nodad"); err != nil {
		return false, fmt.Errorf("newcomer address: %w", err)
	}
	defer func() { _, _ = l.atk.Run("ip", "addr", "del", me.Addr().String()+"/128", "dev", "atk-r1") }()
	var fd int
	if err := l.atk.Do(func() error {
		ifi, err := net.InterfaceByName("atk-r1")
		if err != nil {
			return err
		}
		if fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM, int(htons(unix.ETH_P_IPV6))); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IPV6), Ifindex: ifi.Index})
	}); err != nil {
		if fd > 0 {
			unix.Close(fd)
		}
		return false, fmt.Errorf("newcomer's sniffer: %w", err)
	}
	defer unix.Close(fd)
	tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return false, err
	}
	snd, err := newRawSender(l.atk)
	if err != nil {
		return false, err
	}
	defer snd.close()
	if _, err := snd.send(ctx, 1, 100, func(int) ([]byte, error) {
		return EchoRequest(me, l.cnAddr, n, 0x1e3, seq), nil
	}); err != nil {
		return false, err
	}
	buf := make([]byte, 256)
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		k, _, err := unix.Recvfrom(fd, buf, unix.MSG_TRUNC)
		if err != nil {
			continue
		}
		if echoReplyFrom(buf[:min(k, len(buf))], l.cnAddr, me, seq) {
			return true, nil
		}
	}
	return false, nil
}

// echoReplyFrom: pkt is an Echo Reply from src to dst with sequence number seq (behind any
// Destination Options header).
func echoReplyFrom(pkt []byte, src, dst wire.ILV, seq uint16) bool {
	h, err := wire.ParseIPv6Header(pkt)
	if err != nil || h.Src != src.Addr() || h.Dst != dst.Addr() {
		return false
	}
	next, off := h.NextHeader, wire.IPv6HeaderLen
	for i := 0; i < 2 && next == wire.ProtoDestOpts && len(pkt) >= off+2; i++ {
		next, off = pkt[off], off+8*(int(pkt[off+1])+1)
	}
	return next == wire.ProtoICMPv6 && len(pkt) >= off+8 && pkt[off] == 129 &&
		uint16(pkt[off+6])<<8|uint16(pkt[off+7]) == seq
}
