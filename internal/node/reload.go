package node

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"ilnp/internal/config"
	"ilnp/internal/ilcc"
)

// Reload applies a configuration read again (ilnpd does it on SIGHUP): the handoff mode and
// policy, the LU retransmission timers, the idle timeout, the bound on new sessions, and the
// hosts file, which is re-read whether or not its path changed. A change to anything else
// (interfaces, identity, nonce, DNS, paths) needs a restart: then nothing is applied and the
// error names the keys. Every value is checked before the first is applied, so a reload is
// all or nothing. It returns the keys whose values changed.
func (n *Node) Reload(ctx context.Context, cfg config.Config) (changed []string, err error) {
	err = n.do(ctx, func() error {
		apply, restart := config.Diff(n.cfg, cfg)
		if len(restart) > 0 {
			return fmt.Errorf("reload: %s changed, which needs a restart; nothing applied", strings.Join(restart, ", "))
		}
		mode, err := ilcc.ParseMode(string(cfg.Handoff))
		if err != nil {
			return fmt.Errorf("reload: %w", err)
		}
		policy, err := ilcc.PolicyByName(cfg.Policy)
		if err != nil {
			return fmt.Errorf("reload: %w", err)
		}
		luCfg := n.engine.Config()
		luCfg.InitialTimeout, luCfg.MaxTimeout, luCfg.MaxAttempts = cfg.LUInitialTimeout, cfg.LUMaxTimeout, cfg.LUMaxAttempts
		if err := luCfg.Validate(); err != nil {
			return fmt.Errorf("reload: %w", err)
		}
		// The last step that can fail on input: a hosts file with a bad line keeps the old
		// entries and stops the reload here.
		if n.hosts != nil {
			if err := n.hosts.Reload(cfg.HostsFile); err != nil {
				return fmt.Errorf("reload: %w", err)
			}
		}
		now := time.Now()
		if slices.Contains(apply, "handoff") {
			eff, err := n.cache.SetMode(mode, now)
			if err != nil {
				return fmt.Errorf("reload: %w", err)
			}
			n.apply(eff, now)
		}
		if slices.Contains(apply, "policy") {
			eff, err := n.cache.SetPolicy(policy, now)
			if err != nil {
				return fmt.Errorf("reload: %w", err)
			}
			n.apply(eff, now)
		}
		if err := n.cache.SetIdleTimeout(cfg.SessionIdleTimeout); err != nil {
			return fmt.Errorf("reload: %w", err)
		}
		if err := n.engine.SetConfig(luCfg); err != nil {
			return fmt.Errorf("reload: %w", err)
		}
		if err := n.dp.SetNewSessionsPerSecond(uint32(cfg.NewSessionsPerSecond)); err != nil {
			return fmt.Errorf("reload: %w", err)
		}
		if slices.Contains(apply, "tcp-aware") {
			n.setTCPAware(cfg.TCPAware)
		}
		// Only the fields that may change: other goroutines read the rest of n.cfg.
		n.cfg.Handoff, n.cfg.Policy, n.cfg.LogLevel, n.cfg.HostsFile = cfg.Handoff, cfg.Policy, cfg.LogLevel, cfg.HostsFile
		n.cfg.LUInitialTimeout, n.cfg.LUMaxTimeout, n.cfg.LUMaxAttempts = cfg.LUInitialTimeout, cfg.LUMaxTimeout, cfg.LUMaxAttempts
		n.cfg.SessionIdleTimeout, n.cfg.NewSessionsPerSecond = cfg.SessionIdleTimeout, cfg.NewSessionsPerSecond
		changed = apply
		return nil
	})
	if err != nil {
		return nil, err
	}
	n.log.Info("configuration reloaded", "changed", changed)
	return changed, nil
}

// ShowConfig is the configuration in effect, as the file's key -> value (ilnpctl show config).
func (n *Node) ShowConfig(ctx context.Context) (any, error) {
	var values map[string]string
	err := n.do(ctx, func() error { // Reload changes n.cfg on the loop
		values = n.cfg.Values()
		return nil
	})
	return values, err
}
