package lab

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"ilnp/lab/netns"
)

// Real paths (issue 24): R1's links to R2 and R3 as the Internet has them rather than as the
// lab's kind routers do: a smaller MTU (a tunnel, PPPoE's 1492), and a router that drops
// packets carrying a Destination Options header (RFC 7872, RFC 9098), where the nonce goes.

// RealPathLinks are the links --path-mtu and --drop-exthdr name, as R1's interface names.
var RealPathLinks = []string{"r1-r2", "r1-r3"}

// RealPaths is what a run changes on those links.
type RealPaths struct {
	// MTU is the link's MTU in bytes by link name, set on both routers' ends, so each router
	// answers a bigger packet it forwards onto the link with Packet Too Big.
	MTU map[string]int
	// DropExthdr are links to and from which R1 drops forwarded packets with a Destination
	// Options header (nftables `exthdr dst exists drop`).
	DropExthdr []string
}

// Empty reports whether the paths are the lab's usual ones.
func (p RealPaths) Empty() bool { return len(p.MTU) == 0 && len(p.DropExthdr) == 0 }

// ParsePathMTU parses --path-mtu LINK=BYTES.
func ParsePathMTU(s string) (string, int, error) {
	link, bytes, ok := strings.Cut(s, "=")
	if !ok {
		return "", 0, fmt.Errorf("--path-mtu %q: want LINK=BYTES (LINK one of %s)", s, strings.Join(RealPathLinks, ", "))
	}
	n, err := strconv.Atoi(bytes)
	if err != nil {
		return "", 0, fmt.Errorf("--path-mtu %q: %w", s, err)
	}
	return link, n, nil
}

// Validate checks link names and sizes: IPv6 needs 1280 bytes on every link (RFC 8200 s.5),
// and the lab's links carry 1500.
func (p RealPaths) Validate() error {
	for link, mtu := range p.MTU {
		if !slices.Contains(RealPathLinks, link) {
			return fmt.Errorf("--path-mtu: unknown link %q (want one of %s)", link, strings.Join(RealPathLinks, ", "))
		}
		if mtu < 1280 || mtu > 1500 {
			return fmt.Errorf("--path-mtu %s=%d: want 1280 to 1500 bytes", link, mtu)
		}
	}
	for _, link := range p.DropExthdr {
		if !slices.Contains(RealPathLinks, link) {
			return fmt.Errorf("--drop-exthdr: unknown link %q (want one of %s)", link, strings.Join(RealPathLinks, ", "))
		}
	}
	return nil
}

// realPathsTable is R1's nftables table for --drop-exthdr. (Its chain may not be called
// "fwd", an nft keyword: platform.md.)
const realPathsTable = "ilnplab_realpaths"

// applyRealPaths sets the links' MTUs on both ends and R1's Destination Options filter.
func (t *Topology) applyRealPaths(p RealPaths) error {
	far := map[string]struct {
		ns *netns.NS
		If string
	}{"r1-r2": {t.R2, "r2-r1"}, "r1-r3": {t.R3, "r3-r1"}}
	for _, link := range slices.Sorted(maps.Keys(p.MTU)) {
		mtu := strconv.Itoa(p.MTU[link])
		if _, err := t.R1.Run("ip", "link", "set", link, "mtu", mtu); err != nil {
			return fmt.Errorf("--path-mtu: %w", err)
		}
		if _, err := far[link].ns.Run("ip", "link", "set", far[link].If, "mtu", mtu); err != nil {
			return fmt.Errorf("--path-mtu: %w", err)
		}
	}
	if len(p.DropExthdr) == 0 {
		return nil
	}
	rules := "add table inet " + realPathsTable + " ; add chain inet " + realPathsTable +
		" dropdo { type filter hook forward priority 0 ; policy accept ; }"
	for _, link := range p.DropExthdr {
		rules += fmt.Sprintf(" ; add rule inet %s dropdo iifname %s exthdr dst exists drop", realPathsTable, link)
		rules += fmt.Sprintf(" ; add rule inet %s dropdo oifname %s exthdr dst exists drop", realPathsTable, link)
	}
	if _, err := t.R1.Run("nft", rules); err != nil {
		return fmt.Errorf("--drop-exthdr: %w", err)
	}
	return nil
}

// pathEncapsulated reports whether either ILNP node's datapath sent a packet as ILNPv6 in UDP
// over IPv6 (dp_egress_encap6 in the ilnpctl-*-stats.json Collect wrote); nil when a node's
// stats are missing.
func pathEncapsulated(dir string) *bool {
	sent, ok := sumStats(dir, "dp_egress_encap6")
	if !ok {
		return nil
	}
	v := sent > 0
	return &v
}

// sumStats sums one counter over the CN's and the MN's ilnpctl stats.
func sumStats(dir, name string) (uint64, bool) {
	var total uint64
	for _, node := range []string{"cn", "mn"} {
		b, err := os.ReadFile(filepath.Join(dir, "ilnpctl-"+node+"-stats.json"))
		if err != nil {
			return 0, false
		}
		var stats map[string]uint64
		if json.Unmarshal(b, &stats) != nil {
			return 0, false
		}
		v, ok := stats[name]
		if !ok {
			return 0, false
		}
		total += v
	}
	return total, true
}

// pmtuErrorsTranslated sums the Packet Too Big messages both ILNP nodes' datapaths translated
// to the session view (dp_ingress_ptb_translated in the ilnpctl-*-stats.json Collect wrote);
// nil when a node's stats are missing (not an ILNP mode, or the daemon did not answer).
func pmtuErrorsTranslated(dir string) *int {
	total := 0
	for _, node := range []string{"cn", "mn"} {
		b, err := os.ReadFile(filepath.Join(dir, "ilnpctl-"+node+"-stats.json"))
		if err != nil {
			return nil
		}
		var stats map[string]uint64
		if json.Unmarshal(b, &stats) != nil {
			return nil
		}
		v, ok := stats["dp_ingress_ptb_translated"]
		if !ok {
			return nil
		}
		total += int(v)
	}
	return &total
}
