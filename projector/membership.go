package projector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/agentlog/agentlog/internal/process"
	"github.com/agentlog/agentlog/store"
	"github.com/agentlog/agentlog/wire"
	"github.com/nats-io/nats.go/jetstream"
)

// Membership: the instances of a projector group divide the partitions by lease.
const (
	// MembersBucket is the KV bucket of live projector instances: key = instance name (as a
	// subject token), value MemberValue. Entries expire MemberTTL after the instance's last
	// heartbeat, which is how a killed instance leaves.
	MembersBucket = store.ProjectorMembersBucket

	DefaultMemberTTL = store.ProjectorMemberTTL // member lease (KV entry max age: `agentlog provision` sets it)
)

// memberState is the membership of an instance: its lease in MembersBucket and the loops that
// renew it and rebalance the partitions.
type memberState struct {
	memberKey   string
	memberTTL   time.Duration
	startedAt   time.Time
	members     jetstream.KeyValue
	replicas    int // of the members bucket (the stream's)
	health      health
	mcancel     context.CancelFunc // stops the membership loops
	loop        sync.WaitGroup     // the membership and heartbeat loops
	lastMembers []string           // the members at the last rebalance (guarded by wmu)
}

// ErrNameInUse is returned (wrapped) by Start when this very process already runs an instance of
// this name, or when ctx ends while another live instance holds the name's lease.
var ErrNameInUse = errors.New("projector: instance name in use")

// MemberValue is the value of an instance's key in MembersBucket: its name, host name, process
// id, start time (Unix ms) and the partitions it consumes.
type MemberValue struct {
	Name      string `json:"name"`
	Host      string `json:"host,omitempty"`
	PID       int    `json:"pid"`
	StartedAt int64  `json:"startedAt"`
	Owned     []int  `json:"owned"`
}

// defaultName is the instance name Options.Name defaults to: "<hostname>-<pid>".
func defaultName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "projector"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// memberKeyOf is the key of instance name in MembersBucket: its subject token, or
// "projector-<pid>" for a name that has none.
func memberKeyOf(name string) string {
	if key, err := wire.Token(name); err == nil {
		return key
	}
	return fmt.Sprintf("projector-%d", os.Getpid())
}

// join opens the members bucket (replicated as the AGENTLOG stream) and claims this instance's
// name in it (claimName).
func (p *Projector) join(ctx context.Context) error {
	replicas := 1
	if info := p.store.Stream().CachedInfo(); info != nil {
		replicas = info.Config.Replicas
	}
	members, err := p.store.ProjectorMembers(ctx)
	if err != nil {
		return fmt.Errorf("projector %q: %w", p.name, err)
	}
	if p.memberTTL != store.ProjectorMemberTTL {
		return fmt.Errorf("projector %q: MemberTTL %s, but KV bucket %s expires leases after %s (as `agentlog provision` makes it)", p.name, p.memberTTL, MembersBucket, store.ProjectorMemberTTL)
	}
	p.members, p.replicas = members, replicas
	p.startedAt = time.Now()
	return p.claimName(ctx)
}

// memberValue is this instance's MemberValue, without the partitions it owns.
func (p *Projector) memberValue() MemberValue {
	return MemberValue{Name: p.name, Host: process.Host(), PID: os.Getpid(), StartedAt: p.startedAt.UnixMilli()}
}

// claimName creates this instance's lease with a KV create, so that two live instances never share
// a name (they would share a lease and both claim the same partitions). A lease held by a process
// of this host that is dead (a killed instance restarted under its name; internal/process) is
// taken over at once; a lease held by this very process is refused; any other is waited for until it expires (its
// holder stopped renewing it) or ctx ends, with one log line saying so.
func (p *Projector) claimName(ctx context.Context) error {
	me := p.memberValue()
	v, _ := json.Marshal(me)
	logged := false
	for {
		_, err := p.members.Create(ctx, p.memberKey, v)
		if err == nil {
			if logged {
				p.logger.Info("projector: took the name's lease", "bucket", MembersBucket)
			}
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("projector %q: claiming its lease in KV bucket %s: %w", p.name, MembersBucket, err)
		}
		holder, desc := MemberValue{}, "another instance"
		e, gerr := p.members.Get(ctx, p.memberKey)
		if gerr == nil && json.Unmarshal(e.Value(), &holder) == nil {
			desc = fmt.Sprintf("host %q pid %d, started %s", holder.Host, holder.PID, time.UnixMilli(holder.StartedAt).UTC().Format(time.RFC3339))
			sameHost := holder.Host != "" && holder.Host == me.Host
			gone := sameHost && process.Gone(holder.PID, time.UnixMilli(holder.StartedAt))
			switch {
			case sameHost && holder.PID == me.PID && !gone:
				return fmt.Errorf("%w: %q is held by an instance of this process (%s); give this one another --name", ErrNameInUse, p.name, desc)
			case gone:
				// Our own lease, left by a killed process of this host: take it over at once.
				if _, uerr := p.members.Update(ctx, p.memberKey, v, e.Revision()); uerr == nil {
					p.logger.Info("projector: took over the lease of a dead process of this host", "bucket", MembersBucket, "holder", desc)
					return nil
				}
				continue // changed meanwhile: look again
			}
		}
		if !logged {
			logged = true
			p.logger.Warn("projector: the instance name's lease is held; waiting for it to expire (up to the member TTL after its holder stops renewing it)",
				"bucket", MembersBucket, "holder", desc, "ttl", p.memberTTL)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %q is held by a live projector (%s); give this one another --name, or wait %s for a crashed instance's lease to expire: %w",
				ErrNameInUse, p.name, desc, p.memberTTL, ctx.Err())
		case <-time.After(p.memberTTL / 4):
		}
	}
}

// membersFailed handles a failure of the members bucket: logged once until it recovers. A bucket
// that is gone (a server that lost it, or an operator) is not created again here (a projector
// creates no stream): the log says to run `agentlog provision`.
func (p *Projector) membersFailed(ctx context.Context, op string, err error) {
	if ctx.Err() != nil {
		return
	}
	msg := "projector: members bucket unavailable"
	if isMissing(err) {
		msg = "projector: members bucket unavailable (gone? run `agentlog provision` to create it again)"
	}
	p.health.fail(p.logger, "members", msg, err, "bucket", MembersBucket, "op", op)
}

// membership keeps the assignment of partitions up to date (every MemberTTL/3), and heartbeat
// renews the lease on its own schedule, so that a slow handover never lets the lease lapse.
func (p *Projector) membership(ctx context.Context) { p.every(ctx, p.memberTTL/3, p.rebalance) }

func (p *Projector) heartbeat(ctx context.Context) { p.every(ctx, p.memberTTL/4, p.renew) }

// every runs f every d until ctx ends; it is one of p.loop's goroutines.
func (p *Projector) every(ctx context.Context, d time.Duration, f func(context.Context)) {
	defer p.loop.Done()
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f(ctx)
	}
}

// renew puts this instance's lease, naming the partitions it consumes.
func (p *Projector) renew(ctx context.Context) {
	me := p.memberValue()
	me.Owned = p.Owned()
	v, _ := json.Marshal(me)
	if _, err := p.members.Put(ctx, p.memberKey, v); err != nil {
		p.membersFailed(ctx, "renew", err)
		return
	}
	p.health.ok(p.logger, "members", "projector: members bucket available again", "bucket", MembersBucket)
}

// rebalance lists the live members and starts and stops partition workers (the stopped ones in
// parallel); when the partitions owned change, it renews the lease at once.
func (p *Projector) rebalance(ctx context.Context) {
	members, err := p.store.ProjectorMemberKeys(ctx)
	if err != nil {
		p.membersFailed(ctx, "list", err)
		return
	}
	if !slices.Contains(members, p.memberKey) {
		members = append(members, p.memberKey)
	}
	slices.Sort(members)
	mine := Assign(members, p.memberKey, p.store.Partitions())
	p.wmu.Lock()
	if p.wstopped {
		p.wmu.Unlock()
		return
	}
	// Stop the partitions no longer ours, then start the new ones, each set in parallel (a
	// consumer create is a JetStream API round trip; sixteen in a row slowed every start and
	// handover). The lease is renewed by heartbeat meanwhile: it reads the owned set through an
	// atomic snapshot, never through wmu, so a slow handover cannot let it lapse.
	var wg sync.WaitGroup
	for part, w := range p.workers {
		if !slices.Contains(mine, part) {
			wg.Add(1)
			go func() { defer wg.Done(); w.stop(p.quit) }()
			delete(p.workers, part)
		}
	}
	wg.Wait()
	var toStart []int
	for _, part := range mine {
		if _, ok := p.workers[part]; !ok {
			toStart = append(toStart, part)
		}
	}
	startedW := make([]*worker, len(toStart))
	for i, part := range toStart {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := p.startWorker(ctx, part, max(p.cacheSessions/max(len(mine), 1), 16))
			if err != nil {
				if ctx.Err() == nil {
					p.logger.Warn("projector: starting partition", "partition", part, "err", err)
				}
				return
			}
			startedW[i] = w
		}()
	}
	wg.Wait()
	var started []int
	for i, w := range startedW {
		if w != nil {
			p.workers[toStart[i]] = w
			started = append(started, toStart[i])
		}
	}
	owned := make([]int, 0, len(p.workers))
	for part := range p.workers {
		owned = append(owned, part)
	}
	slices.Sort(owned)
	var before []int
	if prev := p.owned.Swap(&owned); prev != nil {
		before = *prev
	}
	changed := len(started) > 0 || !slices.Equal(p.lastMembers, members) || !slices.Equal(before, owned)
	if changed {
		p.logger.Info("projector: partitions assigned", "members", members, "owned", owned, "started", started)
		p.lastMembers = members
	}
	p.wmu.Unlock()
	if changed {
		p.renew(ctx)
	}
}

// Assign returns the partitions that member owns among members (instance names): the members are
// sorted and partition p goes to the (p mod len(members))-th. Nil when member is not listed.
func Assign(members []string, member string, partitions int) []int {
	ms := slices.Clone(members)
	slices.Sort(ms)
	ms = slices.Compact(ms)
	idx := slices.Index(ms, member)
	if idx < 0 {
		return nil
	}
	var out []int
	for p := 0; p < partitions; p++ {
		if p%len(ms) == idx {
			out = append(out, p)
		}
	}
	return out
}

// Owned returns the partitions this instance consumes now, sorted.
func (p *Projector) Owned() []int {
	if o := p.owned.Load(); o != nil {
		return slices.Clone(*o)
	}
	return nil
}
