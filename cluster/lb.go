package cluster

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// balancer is a TCP round-robin load balancer: every accepted connection is piped to the
// next backend that accepts a connection, skipping dead ones. It knows nothing of gRPC: a
// client whose backend dies sees its connection break, reconnects through the balancer and
// lands on a live backend, as behind a cloud TCP load balancer.
type balancer struct {
	ln       net.Listener
	backends func() []string

	mu    sync.Mutex
	next  int
	conns map[net.Conn]string // every piped connection, both ends, to its backend's address
	wg    sync.WaitGroup
}

// newBalancer listens on addr and serves until close.
func newBalancer(addr string, backends func() []string) (*balancer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	b := &balancer{ln: ln, backends: backends, conns: map[net.Conn]string{}}
	b.wg.Add(1)
	go b.serve()
	return b, nil
}

func (b *balancer) serve() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		b.wg.Add(1)
		go b.pipe(c)
	}
}

// dial connects to the next backend in turn that answers, trying each once.
func (b *balancer) dial() (net.Conn, error) {
	addrs := b.backends()
	if len(addrs) == 0 {
		return nil, errors.New("no backends")
	}
	b.mu.Lock()
	start := b.next
	b.next++
	b.mu.Unlock()
	var last error
	for i := range addrs {
		c, err := net.DialTimeout("tcp", addrs[(start+i)%len(addrs)], time.Second)
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, last
}

func (b *balancer) pipe(c net.Conn) {
	defer b.wg.Done()
	up, err := b.dial()
	if err != nil {
		_ = c.Close()
		return
	}
	if !b.track(up.RemoteAddr().String(), c, up) {
		return
	}
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// Either side ending ends both: a half-open gRPC connection helps nobody.
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go cp(up, c)
	go cp(c, up)
	<-done
	<-done
	b.untrack(c, up)
}

// track records a live pair; it reports false (and closes both) once the balancer closed.
func (b *balancer) track(backend string, cs ...net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conns == nil {
		for _, c := range cs {
			_ = c.Close()
		}
		return false
	}
	for _, c := range cs {
		b.conns[c] = backend
	}
	return true
}

func (b *balancer) untrack(cs ...net.Conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range cs {
		delete(b.conns, c)
	}
}

// perBackend counts the live client connections piped to each backend address.
func (b *balancer) perBackend() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := map[string]int{}
	for _, backend := range b.conns {
		n[backend]++
	}
	// Each pair is in the map twice, once per end.
	for k := range n {
		n[k] /= 2
	}
	return n
}

// close stops accepting, closes every piped connection and waits for the pipes to end.
func (b *balancer) close() {
	_ = b.ln.Close()
	b.mu.Lock()
	for c := range b.conns {
		_ = c.Close()
	}
	b.conns = nil
	b.mu.Unlock()
	b.wg.Wait()
}
