// The other side of TransparencyTests: golang.org/x/mod's sumdb/note and sumdb/tlog (Debian's
// golang-golang-x-mod-dev), built offline.
//
//	tlogpeer tiles N DIR        entries "entry 0".."entry N-1": every tile (tlog.NewTiles, height
//	                            8) written under DIR at its x/mod path; prints the root hash (base64)
//	tlogpeer sign SKEY FILE     prints FILE's text signed by the signer key SKEY
//	tlogpeer open VKEY FILE     prints the text of the note in FILE if VKEY signed it, else exits 1
package main

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

type memory []tlog.Hash

func (m memory) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, index := range indexes {
		out[i] = m[index]
	}
	return out, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

func main() {
	switch os.Args[1] {
	case "tiles":
		n, _ := strconv.ParseInt(os.Args[2], 10, 64)
		var stored memory
		for i := int64(0); i < n; i++ {
			hashes, err := tlog.StoredHashes(i, []byte(fmt.Sprintf("entry %d", i)), stored)
			if err != nil {
				fail(err)
			}
			stored = append(stored, hashes...)
		}
		// NewTiles names every width a partial tile had on the way; a log keeps the last.
		widest := map[[2]int64]tlog.Tile{}
		for _, tile := range tlog.NewTiles(8, 0, n) {
			key := [2]int64{int64(tile.L), tile.N}
			if tile.W > widest[key].W {
				widest[key] = tile
			}
		}
		for _, tile := range widest {
			data, err := tlog.ReadTileData(tile, stored)
			if err != nil {
				fail(err)
			}
			path := filepath.Join(os.Args[3], tile.Path())
			os.MkdirAll(filepath.Dir(path), 0o755)
			if err := os.WriteFile(path, data, 0o644); err != nil {
				fail(err)
			}
		}
		root, err := tlog.TreeHash(n, stored)
		if err != nil {
			fail(err)
		}
		fmt.Println(base64.StdEncoding.EncodeToString(root[:]))
	case "proofs", "check":
		// proofs T N M: the record proof of entry N in the tree of T entries and the tree
		// proof of M entries in T, as base64 lines "record", then "tree", then the roots.
		// check T N M FILE: the same lines (Signet's) checked with CheckRecord and CheckTree.
		t, _ := strconv.ParseInt(os.Args[2], 10, 64)
		n, _ := strconv.ParseInt(os.Args[3], 10, 64)
		m, _ := strconv.ParseInt(os.Args[4], 10, 64)
		var stored memory
		for i := int64(0); i < t; i++ {
			hashes, _ := tlog.StoredHashes(i, []byte(fmt.Sprintf("entry %d", i)), stored)
			stored = append(stored, hashes...)
		}
		rootT, _ := tlog.TreeHash(t, stored)
		rootM, _ := tlog.TreeHash(m, stored)
		if os.Args[1] == "proofs" {
			record, err := tlog.ProveRecord(t, n, stored)
			if err != nil {
				fail(err)
			}
			tree, err := tlog.ProveTree(t, m, stored)
			if err != nil {
				fail(err)
			}
			for _, h := range record {
				fmt.Println("record " + base64.StdEncoding.EncodeToString(h[:]))
			}
			for _, h := range tree {
				fmt.Println("tree " + base64.StdEncoding.EncodeToString(h[:]))
			}
			fmt.Println("roots " + base64.StdEncoding.EncodeToString(rootT[:]) + " " + base64.StdEncoding.EncodeToString(rootM[:]))
			return
		}
		lines, _ := os.ReadFile(os.Args[5])
		var record tlog.RecordProof
		var tree tlog.TreeProof
		for _, line := range strings.Split(strings.TrimSpace(string(lines)), "\n") {
			kind, b64, _ := strings.Cut(line, " ")
			raw, _ := base64.StdEncoding.DecodeString(b64)
			var h tlog.Hash
			copy(h[:], raw)
			if kind == "record" {
				record = append(record, h)
			} else if kind == "tree" {
				tree = append(tree, h)
			}
		}
		if err := tlog.CheckRecord(record, t, rootT, n, tlog.RecordHash([]byte(fmt.Sprintf("entry %d", n)))); err != nil {
			fail(fmt.Errorf("record: %v", err))
		}
		if err := tlog.CheckTree(tree, t, rootT, m, rootM); err != nil {
			fail(fmt.Errorf("tree: %v", err))
		}
		fmt.Println("ok")
	case "sign":
		signer, err := note.NewSigner(os.Args[2])
		if err != nil {
			fail(err)
		}
		text, _ := os.ReadFile(os.Args[3])
		msg, err := note.Sign(&note.Note{Text: string(text)}, signer)
		if err != nil {
			fail(err)
		}
		os.Stdout.Write(msg)
	case "open":
		verifier, err := note.NewVerifier(os.Args[2])
		if err != nil {
			fail(err)
		}
		msg, _ := os.ReadFile(os.Args[3])
		n, err := note.Open(msg, note.VerifierList(verifier))
		if err != nil {
			fail(err)
		}
		fmt.Print(n.Text)
	}
}
