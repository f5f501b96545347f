// Package tlsfiles builds the TLS configurations of SW4RM's servers and clients from PEM
// files, and reloads a certificate when its files change, so that rotating it needs no
// restart: the next handshake after the files are replaced presents the new certificate.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// KeyPair is a certificate and its private key read from two PEM files and read again when
// either file changes (its modification time or size), checked at every handshake. A
// replacement that does not load — say the certificate was written and the key not yet —
// keeps the previous pair in service until the files load together.
type KeyPair struct {
	certFile, keyFile string
	onReload          func(error)

	mu     sync.Mutex
	cert   *tls.Certificate
	loaded stamps // the files' stamps when cert was read
	failed stamps // the stamps of the last replacement that did not load
}

// stamp identifies one version of a file.
type stamp struct {
	mod  time.Time
	size int64
	err  string // a stat error (the file is gone mid-rotation)
}

type stamps struct{ cert, key stamp }

func stampOf(path string) stamp {
	fi, err := os.Stat(path)
	if err != nil {
		return stamp{err: err.Error()}
	}
	return stamp{mod: fi.ModTime(), size: fi.Size()}
}

// LoadKeyPair reads the pair, failing if either file is unreadable or they do not match.
// onReload, which may be nil, is told of every later reload: nil when a new pair is in
// service, the error when replaced files did not load (once per replacement).
func LoadKeyPair(certFile, keyFile string, onReload func(error)) (*KeyPair, error) {
	k := &KeyPair{certFile: certFile, keyFile: keyFile, onReload: onReload}
	st := k.stamps()
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("certificate %s and key %s: %w", certFile, keyFile, err)
	}
	k.cert, k.loaded = &cert, st
	return k, nil
}

func (k *KeyPair) stamps() stamps {
	return stamps{cert: stampOf(k.certFile), key: stampOf(k.keyFile)}
}

// Certificate returns the pair in service, first reading the files again if they changed
// since it was read.
func (k *KeyPair) Certificate() *tls.Certificate {
	k.mu.Lock()
	defer k.mu.Unlock()
	// Stat before reading: if the files change while being read, the stamps recorded are
	// the older ones, and the next handshake reads them again.
	st := k.stamps()
	if st == k.loaded || st == k.failed {
		return k.cert
	}
	cert, err := tls.LoadX509KeyPair(k.certFile, k.keyFile)
	if err != nil {
		k.failed = st
		if k.onReload != nil {
			k.onReload(fmt.Errorf("certificate %s and key %s changed but do not load; still serving the previous certificate: %w", k.certFile, k.keyFile, err))
		}
		return k.cert
	}
	k.cert, k.loaded, k.failed = &cert, st, stamps{}
	if k.onReload != nil {
		k.onReload(nil)
	}
	return k.cert
}

// CertPool reads a PEM bundle of CA certificates; a file without one is an error.
func CertPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// ServerConfig is the TLS configuration of a server presenting the certificate in certFile
// and keyFile (reloaded when they change, onReload told as LoadKeyPair says), and, when
// clientCAFile is set, requiring every client to present a certificate that CA bundle
// verifies (mutual TLS). With all three empty it returns nil: no TLS. Only one of certFile
// and keyFile, a client CA without a certificate, or a file that does not load is an error.
func ServerConfig(certFile, keyFile, clientCAFile string, onReload func(error)) (*tls.Config, error) {
	if certFile == "" && keyFile == "" {
		if clientCAFile != "" {
			return nil, errors.New("a client CA (mutual TLS) needs the server's own certificate and key too")
		}
		return nil, nil
	}
	if certFile == "" || keyFile == "" {
		return nil, errors.New("a certificate needs its key and a key its certificate: set both files, or neither for plaintext")
	}
	pair, err := LoadKeyPair(certFile, keyFile, onReload)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return pair.Certificate(), nil
		},
	}
	if clientCAFile != "" {
		pool, err := CertPool(clientCAFile)
		if err != nil {
			return nil, fmt.Errorf("client CA: %w", err)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// ClientConfig is the TLS configuration of a client that trusts the CAs in caFile (empty:
// the system's roots) and, when certFile and keyFile are set, presents that certificate to
// servers that ask for one (mutual TLS), reloaded when the files change. Only one of
// certFile and keyFile, or a file that does not load, is an error.
func ClientConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("a client certificate needs its key and a key its certificate: set both files, or neither")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := CertPool(caFile)
		if err != nil {
			return nil, fmt.Errorf("CA: %w", err)
		}
		cfg.RootCAs = pool
	}
	if certFile != "" {
		pair, err := LoadKeyPair(certFile, keyFile, nil)
		if err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return pair.Certificate(), nil
		}
	}
	return cfg, nil
}
