// Package tlstest issues throwaway certificates for tests: a CA, and server and client
// certificates it signs, written as PEM files into the test's temporary directory, so that no
// key is ever committed.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority of one test.
type CA struct {
	// File is the PEM file of the CA's certificate, what a peer trusts.
	File string

	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	dir  string
}

// Pair names the files of an issued certificate and its key.
type Pair struct {
	// CertFile and KeyFile are the PEM files.
	CertFile, KeyFile string
	// Cert is the certificate.
	Cert *x509.Certificate
}

// NewCA makes a CA named name, its certificate written to a file in a temporary directory.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ca := &CA{File: filepath.Join(dir, name+"-ca.pem"), cert: cert, key: key, dir: dir}
	writePEM(t, ca.File, "CERTIFICATE", der)
	return ca
}

// Server issues a server certificate for localhost, 127.0.0.1 and ::1 with common name cn.
func (ca *CA) Server(t testing.TB, cn string) Pair {
	t.Helper()
	p := Pair{CertFile: filepath.Join(ca.dir, cn+".pem"), KeyFile: filepath.Join(ca.dir, cn+"-key.pem")}
	p.Cert = ca.WriteServer(t, p, cn)
	return p
}

// WriteServer issues a server certificate like Server does and writes it over p's files,
// as a certificate rotation does.
func (ca *CA) WriteServer(t testing.TB, p Pair, cn string) *x509.Certificate {
	t.Helper()
	before := modTimes(p)
	cert := ca.issue(t, p, &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	// A real rotation comes long after the files were first written; here it may come
	// within the file system's timestamp granularity, so make sure the change is visible.
	for i, f := range []string{p.CertFile, p.KeyFile} {
		if fi, err := os.Stat(f); err == nil && !before[i].IsZero() && !fi.ModTime().After(before[i]) {
			later := before[i].Add(time.Second)
			if err := os.Chtimes(f, later, later); err != nil {
				t.Fatal(err)
			}
		}
	}
	return cert
}

func modTimes(p Pair) [2]time.Time {
	var out [2]time.Time
	for i, f := range []string{p.CertFile, p.KeyFile} {
		if fi, err := os.Stat(f); err == nil {
			out[i] = fi.ModTime()
		}
	}
	return out
}

// Client issues a client certificate with common name cn.
func (ca *CA) Client(t testing.TB, cn string) Pair {
	t.Helper()
	p := Pair{CertFile: filepath.Join(ca.dir, cn+".pem"), KeyFile: filepath.Join(ca.dir, cn+"-key.pem")}
	p.Cert = ca.issue(t, p, &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	return p
}

func (ca *CA) issue(t testing.TB, p Pair, tmpl *x509.Certificate) *x509.Certificate {
	t.Helper()
	key := newKey(t)
	tmpl.SerialNumber = serial(t)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, p.CertFile, "CERTIFICATE", der)
	writePEM(t, p.KeyFile, "PRIVATE KEY", keyDER)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func writePEM(t testing.TB, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
