import Foundation
import SignetCore
import SignetTestSupport
import Testing

@testable import SignetCrypto

/// The transparency log's building blocks against golang.org/x/mod (Debian's
/// golang-golang-x-mod-dev, built offline): signed notes (c2sp.org/signed-note) both ways, and
/// the tiles and root hash of trees of every shape that matters (c2sp.org/tlog-tiles).
@Suite("Transparency log: signed notes and tiles, against Go's x/mod", .serialized)
struct TransparencyTests {
    /// The x/mod peer, built once per run into a folder of its own.
    static let peer: Result<String, Error> = Result {
        let folder = try TemporaryDirectory()
        let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Go/tlogpeer.go").path
        try FileManager.default.copyItem(atPath: source, toPath: folder.file("tlogpeer.go"))
        let binary = folder.file("tlogpeer")
        let built = try run(
            "go", ["build", "-o", binary, "tlogpeer.go"],
            environment: ["GOPATH": "/usr/share/gocode", "GO111MODULE": "off", "GOFLAGS": "", "GOCACHE": folder.file("cache"), "HOME": folder.path],
            directory: folder.path)
        guard built.status == 0 else { throw SupportError("go build of the x/mod peer failed: \(built.stderr)") }
        // The folder lives as long as the test process.
        Self.kept.append(folder)
        return binary
    }
    nonisolated(unsafe) static var kept: [TemporaryDirectory] = []

    /// The C2SP signed-note specification's example (as x/mod's note tests use it).
    static let exampleVerifier = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
    static let exampleSigner = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
    static let exampleText = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
    static let exampleNote =
        exampleText + "\n— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"

    @Test("the signed-note example: its key parses, the note opens, signing its text gives the same bytes; each alteration is refused")
    func signedNoteExample() throws {
        let verifier = try NoteVerifierKey(Self.exampleVerifier)
        #expect(verifier.description == Self.exampleVerifier)
        let opened = try SignedNote.open(Array(Self.exampleNote.utf8), known: [verifier])
        #expect(opened.text == Self.exampleText && opened.verifiedBy == [verifier])
        let signer = try NoteSignerKey(Self.exampleSigner)
        #expect(signer.verifier == verifier)
        #expect(try SignedNote.sign(Self.exampleText, by: [signer]) == Array(Self.exampleNote.utf8), "Ed25519 is deterministic")

        // Keys: a wrong hash, another algorithm, a name with a space or '+'.
        for bad in [
            "PeterNeumann+c74f20a4+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW", "PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
            "Peter Neumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW", "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10T"
        ] {
            #expect(throws: SignetError.self, "\(bad)") { try NoteVerifierKey(bad) }
        }
        // Notes: text changed, signature changed, no blank line, a control character, a key
        // id another name shares, the same signature twice, signed by nobody known.
        let other = try NoteVerifierKey(name: "Other", publicKey: verifier.publicKey)
        let cases: [(String, String)] = [
            ("text", Self.exampleNote.replacingOccurrences(of: "problem,", with: "problem;")),
            ("signature", Self.exampleNote.replacingOccurrences(of: "x08go", with: "x08gp")),
            ("blank line", Self.exampleNote.replacingOccurrences(of: "\n\n—", with: "\n—")),
            ("control", Self.exampleNote.replacingOccurrences(of: "If you", with: "If\tyou")),
            ("other name", Self.exampleNote.replacingOccurrences(of: "— PeterNeumann", with: "— Other")),
            ("twice", Self.exampleNote + Self.exampleNote.components(separatedBy: "\n\n")[1])
        ]
        for (name, note) in cases {
            #expect(throws: SignetError.self, "\(name)") { try SignedNote.open(Array(note.utf8), known: [verifier, other]) }
        }
        #expect(throws: SignetError.self) { try SignedNote.open(Array(Self.exampleNote.utf8), known: [other]) }
    }

    @Test("x/mod opens Signet's notes and Signet opens x/mod's, with a key made here (Ed25519 through OpenSSL)")
    func notesBothWays() throws {
        let peer = try Self.peer.get()
        let work = try TemporaryDirectory()
        let pem = try run("openssl", ["genpkey", "-algorithm", "ed25519"]).stdout
        let signer = try NoteSignerKey(name: "example.com/log", pem: Array(pem))
        let text = "example.com/log\n42\n\(Array(repeating: UInt8(7), count: 32).base64EncodedString())\n"
        let ours = try work.write("ours.note", Data(try SignedNote.sign(text, by: [signer])))
        let opened = try run(peer, ["open", signer.verifier.description, ours])
        #expect(opened.status == 0 && opened.stdoutText == text, "\(opened.stderr)")
        let textFile = try work.write("text", Data(text.utf8))
        let theirs = try run(peer, ["sign", Self.exampleSigner, textFile])
        #expect(theirs.status == 0, "\(theirs.stderr)")
        let note = try SignedNote.open(Array(theirs.stdout), known: [try NoteVerifierKey(Self.exampleVerifier)])
        #expect(note.text == text)
    }

    @Test("tiles and root hashes equal x/mod's, byte for byte, for trees of 1, 255, 256, 257, 65,536 and 70,000 entries (partial tiles included)")
    func tilesEqualXMod() throws {
        let peer = try Self.peer.get()
        var tree = TileTree()
        for size in [1, 255, 256, 257, 65_536, 70_000] {
            while tree.size < size { tree.append(leafHash: TileTree.leafHash(Array("entry \(tree.size)".utf8))) }
            let folder = try TemporaryDirectory()
            let ran = try run(peer, ["tiles", "\(size)", folder.path])
            #expect(ran.status == 0, "\(ran.stderr)")
            #expect(ran.stdoutText.trimmingCharacters(in: .newlines) == tree.rootHash().base64EncodedString(), "root of \(size)")
            // x/mod names tiles tile/H/L/N (its height in the path); tlog-tiles, tile/L/N.
            var theirs: [String: Data] = [:]
            let base = folder.path + "/tile/8/"
            for case let relative as String in FileManager.default.enumerator(atPath: base)! where !relative.isEmpty {
                var isDirectory: ObjCBool = false
                if FileManager.default.fileExists(atPath: base + relative, isDirectory: &isDirectory), !isDirectory.boolValue {
                    theirs["tile/" + relative] = try Data(contentsOf: URL(fileURLWithPath: base + relative))
                }
            }
            let ours = Dictionary(uniqueKeysWithValues: tree.tiles().map { ($0.path, Data($0.data)) })
            #expect(Set(ours.keys) == Set(theirs.keys), "tile paths for \(size): \(Set(ours.keys).symmetricDifference(theirs.keys).sorted().prefix(5))")
            #expect(ours == theirs, "tile bytes for \(size)")
        }
        #expect(TileTree.indexPath(1_234_067) == "x001/x234/067" && TileTree.indexPath(5) == "005")
    }

    @Test(
        "inclusion and consistency proofs cross-verify both ways with x/mod (RFC 9162), for trees of 1 to 70,000; a proof for index ± 1, a cut or lengthened proof, and another root are refused"
    )
    func proofsBothWays() throws {
        let peer = try Self.peer.get()
        var tree = TileTree()
        while tree.size < 70_000 { tree.append(leafHash: TileTree.leafHash(Array("entry \(tree.size)".utf8))) }
        let work = try TemporaryDirectory()
        for (t, n, m) in [
            (1, 0, 1), (2, 1, 1), (7, 3, 4), (256, 255, 255), (257, 256, 256), (1000, 517, 999), (70_000, 69_999, 65_536), (70_000, 12_345, 4_097)
        ] {
            let theirs = try run(peer, ["proofs", "\(t)", "\(n)", "\(m)"])
            #expect(theirs.status == 0, "\(theirs.stderr)")
            var record: [[UInt8]] = [], consistency: [[UInt8]] = [], roots: [[UInt8]] = []
            for line in theirs.stdoutText.split(separator: "\n") {
                let words = line.split(separator: " ").map(String.init)
                let hashes = words.dropFirst().compactMap { [UInt8](base64: $0) }
                switch words[0] {
                case "record": record += hashes
                case "tree": consistency += hashes
                default: roots = hashes
                }
            }
            #expect(roots == [tree.rootHash(size: t), tree.rootHash(size: m)], "roots of \(t) and \(m)")
            let leaf = TileTree.leafHash(Array("entry \(n)".utf8))
            #expect(TileTree.verifyInclusion(leaf: leaf, index: n, size: t, proof: record, root: tree.rootHash(size: t)), "x/mod's record proof \(n) in \(t)")
            #expect(
                TileTree.verifyConsistency(old: m, new: t, oldRoot: tree.rootHash(size: m), newRoot: tree.rootHash(size: t), proof: consistency),
                "x/mod's tree proof \(m) → \(t)")
            #expect(record == tree.inclusionProof(index: n, size: t) && consistency == tree.consistencyProof(old: m, new: t), "the same proofs")
            let ours =
                (tree.inclusionProof(index: n, size: t).map { "record " + $0.base64EncodedString() }
                + tree.consistencyProof(old: m, new: t).map { "tree " + $0.base64EncodedString() }).joined(separator: "\n")
            let checked = try run(peer, ["check", "\(t)", "\(n)", "\(m)", try work.write("proof-\(t)-\(n)", Data(ours.utf8))])
            #expect(checked.status == 0 && checked.stdoutText == "ok\n", "x/mod checks Signet's proofs: \(checked.stderr)")
            // Refusals.
            let root = tree.rootHash(size: t)
            if t > 1 {
                for other in [n - 1, n + 1] where other >= 0 && other < t {
                    #expect(!TileTree.verifyInclusion(leaf: leaf, index: other, size: t, proof: record, root: root), "index \(other) for \(n)")
                }
                #expect(!TileTree.verifyInclusion(leaf: leaf, index: n, size: t, proof: Array(record.dropLast()), root: root))
                #expect(!TileTree.verifyInclusion(leaf: leaf, index: n, size: t, proof: record + [root], root: root))
                #expect(!TileTree.verifyInclusion(leaf: leaf, index: n, size: t, proof: record, root: tree.rootHash(size: t - 1)))
            }
            if m < t {
                #expect(!TileTree.verifyConsistency(old: m, new: t, oldRoot: tree.rootHash(size: m), newRoot: root, proof: Array(consistency.dropLast())))
                #expect(!TileTree.verifyConsistency(old: m, new: t, oldRoot: root, newRoot: root, proof: consistency), "another old root")
            }
        }
    }

    @Test(
        "checkpoints: the text round-trips (with extension lines); a leading zero, a size over 64 bits, a short hash, an empty extension line or a missing newline is refused"
    )
    func checkpoints() throws {
        let hash = TileTree.leafHash(Array("x".utf8))
        let checkpoint = try Checkpoint(origin: "example.com/log", size: 70_000, rootHash: hash, extensions: ["— witness ABCD"])
        #expect(try Checkpoint(text: checkpoint.text) == checkpoint)
        #expect(checkpoint.text == "example.com/log\n70000\n\(hash.base64EncodedString())\n— witness ABCD\n")
        #expect(try Checkpoint(text: "o\n0\n\(hash.base64EncodedString())\n").size == 0)
        for bad in [
            "o\n070000\n\(hash.base64EncodedString())\n", "o\n18446744073709551616\n\(hash.base64EncodedString())\n", "o\n-1\n\(hash.base64EncodedString())\n",
            "o\n1\n\(Array(hash.dropLast()).base64EncodedString())\n", "o\n1\n\(hash.base64EncodedString())\n\n", "o\n1\n\(hash.base64EncodedString())",
            "\n1\n\(hash.base64EncodedString())\n", "o\n1\n"
        ] {
            #expect(throws: SignetError.self, "\(bad.debugDescription)") { try Checkpoint(text: bad) }
        }
    }

    /// A log of `size` entries ("entry i"), its key, three witnesses (keys made by openssl).
    struct Fixture {
        let tree: TileTree
        let log: NoteSignerKey
        let witnesses: [NoteSignerKey]
        let pems: [Data]
        static let origin = "example.com/signet-log"

        init(size: Int) throws {
            var tree = TileTree()
            while tree.size < size { tree.append(leafHash: TileTree.leafHash(Array("entry \(tree.size)".utf8))) }
            self.tree = tree
            log = try NoteSignerKey(name: Self.origin, pem: Array(try run("openssl", ["genpkey", "-algorithm", "ed25519"]).stdout))
            pems = try (1...3).map { _ in try run("openssl", ["genpkey", "-algorithm", "ed25519"]).stdout }
            witnesses = try pems.enumerated().map { try NoteSignerKey(name: "witness\($0.offset + 1).example", pem: Array($0.element), type: .cosignatureV1) }
        }

        /// The checkpoint of the whole tree, signed by the log and cosigned by `cosigners`.
        func note(cosigners: [NoteSignerKey], extensions: [String] = [], size: Int? = nil) throws -> [UInt8] {
            let n = size ?? tree.size
            let checkpoint = try Checkpoint(origin: Self.origin, size: UInt64(n), rootHash: tree.rootHash(size: n), extensions: extensions)
            return try SignedNote.cosign(try SignedNote.sign(checkpoint.text, by: [log]), by: cosigners, time: 1_700_000_000)
        }

        func proof(index: Int, note: [UInt8], size: Int? = nil) -> TransparencyProof {
            TransparencyProof(index: UInt64(index), hashes: tree.inclusionProof(index: index, size: size ?? tree.size), checkpoint: note)
        }

        func leaf(_ index: Int) -> [UInt8] { TileTree.leafHash(Array("entry \(index)".utf8)) }
    }

    @Test(
        "cosignatures (c2sp.org/tlog-cosignature, type 0x04) both ways with PyPI cryptography from the specification's text; a cosignature over other extension lines is refused"
    )
    func cosignatures() throws {
        let f = try Fixture(size: 10)
        let work = try TemporaryDirectory()
        let note = try f.note(cosigners: [f.witnesses[0]])
        let file = try work.write("note", Data(note))
        let checked = try run("python3", ["-c", pythonScript("cosignature_check.py"), "verify", f.witnesses[0].verifier.description, file])
        #expect(checked.status == 0 && checked.stdoutText == "1700000000\n", "\(checked.stderr)")
        let pem = try work.write("w2.pem", f.pems[1])
        let theirs = try run("python3", ["-c", pythonScript("cosignature_check.py"), "sign", pem, "witness2.example", "1700000123", file])
        #expect(theirs.status == 0, "\(theirs.stderr)")
        let opened = try SignedNote.open(Array(theirs.stdout), known: [f.log.verifier] + f.witnesses.map(\.verifier))
        #expect(opened.verifiedBy == [f.log.verifier, f.witnesses[0].verifier, f.witnesses[1].verifier])
        #expect(opened.cosignedAt[f.witnesses[1].verifier] == 1_700_000_123)
        // A witness that cosigned a checkpoint with other extension lines: its line moved onto
        // this one does not verify.
        let withExtension = try f.note(cosigners: [f.witnesses[2]], extensions: ["other line"])
        let moved = String(decoding: withExtension, as: UTF8.self).components(separatedBy: "\n").last { $0.hasPrefix("— witness3") }!
        let forged = note + Array((moved + "\n").utf8)
        #expect(throws: SignetError.self) { try SignedNote.open(forged, known: [f.log.verifier] + f.witnesses.map(\.verifier)) }
    }

    @Test(
        "log proofs (c2sp.org/tlog-proof): written and read back; 2 of 3 witnesses verify; quorum k - 1, wrong origin, index ± 1, another entry, a duplicated cosignature, a witness key under another name and an unsigned checkpoint are not-logged (exit 3); a proof for 1,000,000 entries with 3 cosignatures is under 2 KB"
    )
    func proofs() throws {
        let f = try Fixture(size: 1000)
        let witnesses = f.witnesses.map(\.verifier)
        let note = try f.note(cosigners: Array(f.witnesses.prefix(2)))
        let proof = f.proof(index: 517, note: note)
        let read = try TransparencyProof(proof.bytes)
        #expect(read == proof)
        #expect(String(decoding: proof.bytes, as: UTF8.self).hasPrefix("c2sp.org/tlog-proof@v1\nindex 517\n"))
        let checkpoint = try read.verify(leaf: f.leaf(517), origin: Fixture.origin, log: f.log.verifier, witnesses: witnesses, quorum: 2)
        #expect(checkpoint.size == 1000)

        func refused(_ why: String, _ body: () throws -> Void) {
            do {
                try body()
                Issue.record("\(why): accepted")
            } catch let error as SignetError {
                #expect(error.code == .notLogged, "\(why): \(error)")
            } catch { Issue.record("\(why): \(error)") }
        }
        refused("quorum k - 1") {
            _ = try f.proof(index: 517, note: try f.note(cosigners: [f.witnesses[0]])).verify(
                leaf: f.leaf(517), origin: Fixture.origin, log: f.log.verifier, witnesses: witnesses, quorum: 2)
        }
        refused("wrong origin") { _ = try read.verify(leaf: f.leaf(517), origin: "example.com/other", log: f.log.verifier, witnesses: witnesses, quorum: 2) }
        for index in [516, 518] {
            refused("index \(index)") {
                _ = try TransparencyProof(index: UInt64(index), hashes: read.hashes, checkpoint: note).verify(
                    leaf: f.leaf(517), origin: Fixture.origin, log: f.log.verifier, witnesses: witnesses, quorum: 2)
            }
        }
        refused("another entry") { _ = try read.verify(leaf: f.leaf(518), origin: Fixture.origin, log: f.log.verifier, witnesses: witnesses, quorum: 2) }
        let line = String(decoding: note, as: UTF8.self).components(separatedBy: "\n").last { $0.hasPrefix("— witness1") }!
        refused("a cosignature twice") {
            _ = try f.proof(index: 517, note: try f.note(cosigners: [f.witnesses[0]]) + Array((line + "\n").utf8)).verify(
                leaf: f.leaf(517), origin: Fixture.origin, log: f.log.verifier, witnesses: witnesses, quorum: 2)
        }
        let renamed = try NoteVerifierKey(name: "witness9.example", publicKey: witnesses[1].publicKey, type: .cosignatureV1)
        refused("a witness key under another name") {
            _ = try read.verify(leaf: f.leaf(517), origin: Fixture.origin, log: f.log.verifier, witnesses: [witnesses[0], renamed], quorum: 2)
        }
        refused("not signed by the log") {
            let stranger = try NoteSignerKey(name: Fixture.origin, pem: Array(try run("openssl", ["genpkey", "-algorithm", "ed25519"]).stdout))
            _ = try read.verify(leaf: f.leaf(517), origin: Fixture.origin, log: stranger.verifier, witnesses: witnesses, quorum: 2)
        }
        // Malformed proofs.
        for bad in [
            "c2sp.org/tlog-proof@v2\nindex 1\n\n", "c2sp.org/tlog-proof@v1\nindex 01\n\n", "c2sp.org/tlog-proof@v1\nindex 1\nAAAA\n\n",
            "c2sp.org/tlog-proof@v1\n"
        ] {
            #expect(throws: SignetError.self, "\(bad.debugDescription)") { try TransparencyProof(Array(bad.utf8) + note) }
        }
        // The size of a proof in a log of 1,000,000 entries: 20 hashes (the tree's depth), the
        // checkpoint, the log's signature and three cosignatures.
        let deep = TransparencyProof(
            index: 999_999, hashes: Array(repeating: f.leaf(0), count: 20),
            checkpoint: try SignedNote.cosign(
                try SignedNote.sign(try Checkpoint(origin: Fixture.origin, size: 1_000_000, rootHash: f.leaf(1)).text, by: [f.log]), by: f.witnesses,
                time: 1_700_000_000))
        #expect(deep.bytes.count <= 2048, "\(deep.bytes.count) bytes")
    }

    @Test(
        "the fuzz corpus's log proof, made with PyPI cryptography from the specifications' text, verifies; with the witness left out of the policy it does not")
    func corpusProof() throws {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent(
            "SignetCLITests/FuzzCorpus/tlog/proof.tlog-proof"
        ).path
        let proof = try TransparencyProof(Array(try Data(contentsOf: URL(fileURLWithPath: path))))
        let log = try NoteVerifierKey("example.com/log+d5ca9a19+ASFS+NGbeR0kRTJC4V8uq2y3z/p7al7TAJeWDgaYgdsS")
        let witness = try NoteVerifierKey("witness.example+444b7fb8+BCL8KXeS8Lb/wL/P237bDAqhTgJaNl7A40Lobjgpy3S2")
        #expect(witness.type == .cosignatureV1 && log.type == .ed25519)
        let leaf = [UInt8](repeating: 1, count: 32)
        #expect(try proof.verify(leaf: leaf, origin: "example.com/log", log: log, witnesses: [witness], quorum: 1).size == 1)
        #expect(throws: SignetError.self) { try proof.verify(leaf: leaf, origin: "example.com/log", log: log, witnesses: [], quorum: 1) }
    }
}
