// Command mip6d is the lab's Mobile IPv6 baseline daemon (RFC 6275), one process per role, run
// inside the role's network namespace by ilnp-lab's mipv6 and mipv6-ro modes. It is lab-only:
// the product never ships it. Configuration is by flags only:
//
//	mip6d -role ha -addr 2001:db8:2::1 -home-prefix 2001:db8:2::/64 -home-link r2-mn \
//	      -ifaces r2-r1,r2-mn [-dad-timeout 1s] [-t-ha 0] -events ha.jsonl
//	mip6d -role mn -hoa HOA -ha 2001:db8:2::1 -home-prefix 2001:db8:2::/64 -ifaces mn-r2,mn-r3 \
//	      [-cn CN[,CN...]] [-correspondent] -events mn.jsonl
//	mip6d -role cn -addr CN -ifaces cn-r1 [-t-cn 0] -events cn.jsonl
//
// -cn on the MN turns route optimisation on with those correspondents (they need a mip6d -role
// cn, or a mobile node's -correspondent when the correspondent is mobile too: the double
// jump). SIGINT/SIGTERM detach everything and exit 0.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"ilnp/lab/mipv6/daemon"
	"ilnp/lab/mipv6/datapath"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mip6d:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("mip6d", flag.ContinueOnError)
	role := fs.String("role", "", "ha, mn or cn")
	node := fs.String("node", "", "node name in the timeline (default: the role)")
	ifaces := fs.String("ifaces", "", "comma-separated interfaces to attach the role's programs to")
	addr := fs.String("addr", "", "ha: the home agent's address on the home link; cn: the correspondent's address")
	homePrefix := fs.String("home-prefix", "", "ha, mn: the home link's /64")
	homeLink := fs.String("home-link", "", "ha: the home link interface (proxy ND)")
	tha := fs.Duration("t-ha", 0, "ha: T_HA, an extra delay added to Binding Update processing on top of DAD (default 0)")
	dad := fs.Duration("dad-timeout", 0, "ha: DAD wait for a new binding's home address (0: UMIP's 1s)")
	tcn := fs.Duration("t-cn", 0, "cn: processing delay added to HoT, CoT and BAck")
	hoa := fs.String("hoa", "", "mn: home address")
	ha := fs.String("ha", "", "mn: home agent address")
	cns := fs.String("cn", "", "mn: comma-separated correspondents to route-optimise with (empty: no RO)")
	asCN := fs.Bool("correspondent", false, "mn: also answer return routability and BUs at the home address (a mobile peer's RO)")
	freshHome := fs.Bool("fresh-home-test", false, "mn: run the home test at every move away instead of reusing a home keygen token (RFC 6275 s.5.2.7)")
	lifetime := fs.Duration("lifetime", 0, "mn: binding lifetime asked for (0: 420 s)")
	events := fs.String("events", "", "timeline file (JSON lines)")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var cfg daemon.Config
	switch *role {
	case "ha":
		cfg.Role, cfg.ProcessingDelay, cfg.DADTimeout = datapath.RoleHomeAgent, *tha, *dad
	case "mn":
		cfg.Role = datapath.RoleMobileNode
	case "cn":
		cfg.Role, cfg.ProcessingDelay = datapath.RoleCorrespondent, *tcn
	default:
		return fmt.Errorf("-role %q: want ha, mn or cn", *role)
	}
	cfg.Node = *node
	if cfg.Node == "" {
		cfg.Node = *role
	}
	for _, f := range strings.Split(*ifaces, ",") {
		if f = strings.TrimSpace(f); f != "" {
			cfg.Interfaces = append(cfg.Interfaces, f)
		}
	}
	var err error
	parse := func(flagName, s string, dst *netip.Addr) {
		if s == "" || err != nil {
			return
		}
		if *dst, err = netip.ParseAddr(s); err != nil {
			err = fmt.Errorf("-%s: %w", flagName, err)
		}
	}
	parse("addr", *addr, &cfg.Addr)
	parse("hoa", *hoa, &cfg.HomeAddress)
	parse("ha", *ha, &cfg.HomeAgent)
	for _, s := range strings.Split(*cns, ",") {
		if s = strings.TrimSpace(s); s != "" {
			var a netip.Addr
			parse("cn", s, &a)
			cfg.Correspondents = append(cfg.Correspondents, a)
		}
	}
	if *homePrefix != "" && err == nil {
		if cfg.HomePrefix, err = netip.ParsePrefix(*homePrefix); err != nil {
			err = fmt.Errorf("-home-prefix: %w", err)
		}
	}
	if err != nil {
		return err
	}
	cfg.HomeLink, cfg.Lifetime, cfg.Events, cfg.Correspondent = *homeLink, *lifetime, *events, *asCN
	cfg.FreshHomeTest = *freshHome
	if cfg.Lifetime < 0 || *tha < 0 || *tcn < 0 || *dad < 0 {
		return fmt.Errorf("negative duration")
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("-log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv})).With("node", cfg.Node)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return daemon.Run(ctx, cfg, log)
}
