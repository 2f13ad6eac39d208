package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/net/ipv6"

	"ilnp/internal/wire"
)

// LU-ACKs leave from a sender of their own, in batches (sendmmsg): at a correspondent in a mass
// move the loop spent a third of its time in one sendmsg per ACK (issue 28: 1.86 s of the
// loop's 4.93 s in a mass move of 100,000 LUs at 10,000 a second), and the LUs behind it
// waited. The loop encodes the ACK and queues it; the sender writes what has queued up, up to
// ackBatch per system call. ACKs keep their order; a full queue sends on the loop as before.

// ackBatch is how many LU-ACKs one sendmmsg carries at most.
const ackBatch = 64

// ackQueue is how many LU-ACKs may wait for the sender (a second of a mass move's worth
// would be 10,000; the sender keeps up long before).
const ackQueue = 4096

// outLU is an encoded LU-ACK waiting for the sender.
type outLU struct {
	peer     wire.NID
	msg      []byte
	src, dst netip.Addr
}

// ackSender is the LU socket's ACK queue and its sender's reporting.
type ackSender struct {
	q chan outLU
	// sent and failed report each ACK's fate (from the sender's goroutine).
	sent   func(peer wire.NID)
	failed func(peer wire.NID, err error)
}

// startAcks starts the sender; until then (and after ctx ends) ACKs are sent on the caller.
func (s *luSocket) startAcks(ctx context.Context, sent func(wire.NID), failed func(wire.NID, error)) {
	a := &ackSender{q: make(chan outLU, ackQueue), sent: sent, failed: failed}
	s.acks = a
	go s.sendAcks(ctx, a)
}

// queueAck hands an LU-ACK to the sender; queued reports whether it did (false: the caller
// sends it itself with sendPeer, as when there is no sender or its queue is full).
func (s *luSocket) queueAck(peer wire.NID, src, dst netip.Addr, lu wire.PeerLU) (queued bool, err error) {
	if s.acks == nil {
		return false, nil
	}
	msg, err := lu.Marshal(src, dst)
	if err != nil {
		return false, fmt.Errorf("encode LU: %w", err)
	}
	select {
	case s.acks.q <- outLU{peer: peer, msg: msg, src: src, dst: dst}:
		return true, nil
	default:
		return false, nil
	}
}

// sendAcks writes the queued ACKs until ctx ends.
func (s *luSocket) sendAcks(ctx context.Context, a *ackSender) {
	batch := make([]outLU, 0, ackBatch)
	msgs := make([]ipv6.Message, ackBatch)
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-a.q:
			batch = append(batch[:0], m)
		}
		for more := true; more && len(batch) < ackBatch; {
			select {
			case m := <-a.q:
				batch = append(batch, m)
			default:
				more = false
			}
		}
		if err := s.writeAcks(batch, msgs[:len(batch)], a); errors.Is(err, net.ErrClosed) {
			return
		}
	}
}

// writeAcks sends batch (msgs is its scratch space), as many per sendmmsg as the kernel takes;
// a message the kernel refuses is reported failed and the rest go on.
func (s *luSocket) writeAcks(batch []outLU, msgs []ipv6.Message, a *ackSender) error {
	for i, m := range batch {
		cm := &ipv6.ControlMessage{Src: m.src.AsSlice(), HopLimit: 64}
		msgs[i] = ipv6.Message{Buffers: [][]byte{m.msg}, OOB: cm.Marshal(), Addr: &net.IPAddr{IP: m.dst.AsSlice()}}
	}
	for len(batch) > 0 {
		n, err := s.pc.WriteBatch(msgs, 0)
		for _, m := range batch[:max(n, 0)] {
			a.sent(m.peer)
		}
		if n > 0 {
			batch, msgs = batch[n:], msgs[n:]
			continue
		}
		if err == nil {
			err = errors.New("no message sent")
		}
		a.failed(batch[0].peer, fmt.Errorf("send LU %s -> %s: %w", batch[0].src, batch[0].dst, err))
		if errors.Is(err, net.ErrClosed) {
			for _, m := range batch[1:] {
				a.failed(m.peer, err)
			}
			return err
		}
		batch, msgs = batch[1:], msgs[1:]
	}
	return nil
}
