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
}
