package app

import (
	"context"
	"io"
	"time"
)

// Stop shuts everything down: streams are cancelled (their unconfirmed rows stay for the
// next stream), the worker finishes its current tasks, then connections close.
func (a *App) Stop() { a.stopOnce.Do(a.stop) }

func (a *App) stop() {
	if a.grpc != nil {
		stopped := make(chan struct{})
		go func() { a.grpc.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(2 * time.Second):
			a.grpc.Stop() // open StreamIncoming calls never end on their own
		}
	}
	if a.portHTTP != nil {
		// Streams over Connect and gRPC-Web never end on their own either: Close, not Shutdown.
		_ = a.portHTTP.Close()
	}
	if a.grpcLis != nil {
		_ = a.grpcLis.Close() // the servers closed only portMux's listeners
	}
	if a.consoleConn != nil {
		_ = a.consoleConn.Close()
	}
	if a.auth != nil {
		a.auth.Close()
	}
	if a.stopMCP != nil {
		a.stopMCP()
		<-a.mcpDone // before the store closes under it
	}
	if a.stopSweep != nil {
		// After the gRPC server: the router writes the confirmations it answered last.
		a.stopSweep()
		<-a.sweepDone
	}
	if a.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = a.http.Shutdown(ctx)
		cancel()
	}
	if a.stopReconcile != nil {
		// Before the Temporal client and the store close under its sweep.
		a.stopReconcile()
		<-a.reconcileDone
	}
	if a.stopRelay != nil {
		a.stopRelay()
		<-a.relayDone
	}
	if a.worktreeSweep != nil {
		a.worktreeSweep.Stop() // before the executors and the store close under it
	}
	for _, w := range a.toolWorkers {
		w.Stop()
	}
	if a.closeTools != nil {
		a.closeTools()
	}
	if a.worker != nil {
		a.worker.Stop()
	}
	if a.temporal != nil {
		a.temporal.Close()
	}
	if c, ok := a.reasoning.(io.Closer); ok {
		_ = c.Close() // after the worker and the gRPC server, its last callers
	}
	a.sink.Close() // flush audit rows before the store goes away
	if a.stopTracing != nil {
		// Last: the spans of everything stopped above are exported.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = a.stopTracing(ctx)
		cancel()
	}
	if a.store != nil {
		a.store.Close()
	}
}
