// Package sigloss drops chosen signalling messages in a router namespace: exactly the n-th
// Locator Update, LU-ACK, Binding Update, Binding Acknowledgement or return-routability
// message forwarded by that router (thesis §6.3: "one lost LU / LU-ACK / BU / BAck").
//
// It writes nftables rules in a table of its own on the forward hook. nft finds the transport
// header past the IPv6 extension headers (ipv6_find_hdr), so an LU behind the ILNP Nonce
// destination option (RFC 6744) and a BU behind the Home Address option (RFC 6275 s.6.3)
// still match on their ICMPv6 type / Mobility Header type. Each rule counts its matches with
// `numgen inc` and drops only when the count reaches n; a counter says whether it fired.
package sigloss

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Message is a kind of signalling message.
type Message int

// The messages the thesis loses one of (Tables 6.3-6.12).
const (
	LU    Message = iota // ICMPv6 156, Operation 1 (RFC 6743 s.2, byte 5)
	LUAck                // ICMPv6 156, Operation 2
	BRR                  // Mobility Header types (RFC 6275 s.6.1)
	HoTI
	CoTI
	HoT
	CoT
	BU
	BAck
)

var names = map[Message]string{LU: "lu", LUAck: "lu-ack", BRR: "brr", HoTI: "hoti", CoTI: "coti",
	HoT: "hot", CoT: "cot", BU: "bu", BAck: "back"}

func (m Message) String() string {
	if n, ok := names[m]; ok {
		return n
	}
	return fmt.Sprintf("message%d", int(m))
}

// ParseMessage reads a name as String writes it.
func ParseMessage(s string) (Message, error) {
	for m, n := range names {
		if strings.EqualFold(s, n) {
			return m, nil
		}
	}
	return 0, fmt.Errorf("unknown signalling message %q (lu, lu-ack, bu, back, hoti, coti, hot, cot, brr)", s)
}

// mhType is the Mobility Header type of a MIPv6 message (RFC 6275 s.6.1.2-6.1.8).
func (m Message) mhType() (int, bool) {
	if m >= BRR && m <= BAck {
		return int(m - BRR), true
	}
	return 0, false
}

// Rule drops the Nth (1-based) matching message forwarded by the router.
type Rule struct {
	Msg Message
	Nth int
	// Tunnelled matches the message inside an IPv6-in-IPv6 tunnel (RFC 2473) instead of
	// plain: the MN's HoTI and the HA's HoT cross the core inside the MN-HA tunnel, BUs and
	// BAcks to and from the HA go plain.
	Tunnelled bool
}

// Match is the nft match expression for the rule's message (without the counting part).
func (r Rule) Match() (string, error) {
	switch r.Msg {
	case LU, LUAck:
		if r.Tunnelled {
			return "", fmt.Errorf("sigloss: %s is never tunnelled", r.Msg)
		}
		op := 1
		if r.Msg == LUAck {
			op = 2
		}
		// Type 156; the Operation in byte 5 of the ICMPv6 message (bit offset 40).
		return fmt.Sprintf("meta l4proto ipv6-icmp icmpv6 type 156 @th,40,8 %d", op), nil
	}
	mh, ok := r.Msg.mhType()
	if !ok {
		return "", fmt.Errorf("sigloss: unknown message %d", int(r.Msg))
	}
	if r.Tunnelled {
		// Transport header = the inner IPv6 header: next header (byte 6) is MH, MH type is
		// byte 2 of the MH after the 40-byte inner header (byte 42).
		return fmt.Sprintf("meta l4proto ipv6 @th,48,8 135 @th,336,8 %d", mh), nil
	}
	// MH type is byte 2 of the Mobility Header.
	return fmt.Sprintf("meta l4proto 135 @th,16,8 %d", mh), nil
}

// Expr is the whole nft rule: match, count matches, drop the Nth.
func (r Rule) Expr() (string, error) {
	if r.Nth < 1 || r.Nth > 1<<20 {
		return "", fmt.Errorf("sigloss: n must be in [1, %d], got %d", 1<<20, r.Nth)
	}
	m, err := r.Match()
	if err != nil {
		return "", err
	}
	// numgen inc counts only packets that reached it (the match before it held).
	return fmt.Sprintf("%s numgen inc mod %d == %d counter drop comment \"%s\"", m, 1<<24, r.Nth-1, r.Comment()), nil
}

// Comment names the rule in the ruleset (and in Dropped's answer).
func (r Rule) Comment() string {
	t := ""
	if r.Tunnelled {
		t = "-tunnelled"
	}
	return fmt.Sprintf("drop-%s%s-%d", r.Msg, t, r.Nth)
}

// Table is the nft table sigloss owns in the router namespace.
const Table = "ilab_sigloss"

// Commands returns the nft invocations (argument lists) that install rules from scratch: a
// table of its own on the inet forward hook, one rule each.
func Commands(rules []Rule) ([][]string, error) {
	cmds := [][]string{
		{"nft", "add", "table", "inet", Table},
		{"nft", "flush", "table", "inet", Table},
		{"nft", "add", "chain", "inet", Table, "forward", "{ type filter hook forward priority -10 ; policy accept ; }"},
	}
	for _, r := range rules {
		e, err := r.Expr()
		if err != nil {
			return nil, err
		}
		cmds = append(cmds, append([]string{"nft", "add", "rule", "inet", Table, "forward"}, strings.Fields(e)...))
	}
	return cmds, nil
}

// Runner runs a command inside the router's namespace (netns.NS.Run fits).
type Runner func(args ...string) (string, error)

// Install replaces sigloss's rules in the namespace by rules.
func Install(run Runner, rules []Rule) error {
	cmds, err := Commands(rules)
	if err != nil {
		return err
	}
	for _, c := range cmds {
		if out, err := run(c...); err != nil {
			return fmt.Errorf("sigloss: %s: %w: %s", strings.Join(c, " "), err, out)
		}
	}
	return nil
}

// Remove deletes sigloss's table (nothing else in the namespace is touched).
func Remove(run Runner) error {
	if out, err := run("nft", "delete", "table", "inet", Table); err != nil {
		return fmt.Errorf("sigloss: delete table: %w: %s", err, out)
	}
	return nil
}

// Dropped reads how many packets each rule dropped, by Comment.
func Dropped(run Runner) (map[string]uint64, error) {
	out, err := run("nft", "-j", "list", "table", "inet", Table)
	if err != nil {
		return nil, fmt.Errorf("sigloss: list: %w: %s", err, out)
	}
	return ParseCounters([]byte(out))
}

// ParseCounters reads `nft -j list ...` output: for each rule with a comment and a counter,
// the counter's packets.
func ParseCounters(b []byte) (map[string]uint64, error) {
	var doc struct {
		Nftables []struct {
			Rule *struct {
				Comment string            `json:"comment"`
				Expr    []json.RawMessage `json:"expr"`
			} `json:"rule"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("sigloss: nft json: %w", err)
	}
	got := map[string]uint64{}
	for _, item := range doc.Nftables {
		if item.Rule == nil || item.Rule.Comment == "" {
			continue
		}
		for _, raw := range item.Rule.Expr {
			var e struct {
				Counter *struct {
					Packets uint64 `json:"packets"`
				} `json:"counter"`
			}
			if json.Unmarshal(raw, &e) == nil && e.Counter != nil {
				got[item.Rule.Comment] += e.Counter.Packets
			}
		}
	}
	return got, nil
}
