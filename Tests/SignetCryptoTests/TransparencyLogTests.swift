import Foundation
import SignetCore
import SignetTestSupport
import Testing

@testable import SignetCrypto

/// The log as files (written, reopened, read through its tiles), the witness's protocol and
/// the policy a device holds checkpoints to.
@Suite("Transparency log: the log folder, tiles read back, the witness protocol, policies")
struct TransparencyLogTests {
    /// An Ed25519 key from a fixed seed (PKCS#8 DER wrapped in PEM): the same key every run.
    static func key(_ seed: UInt8, name: String, witness: Bool = false) throws -> NoteSignerKey {
        let der: [UInt8] = [0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20] + Array(repeating: seed, count: 32)
        let pem = "-----BEGIN PRIVATE KEY-----\n\(Data(der).base64EncodedString())\n-----END PRIVATE KEY-----\n"
        return try NoteSignerKey(name: name, pem: Array(pem.utf8), type: witness ? .cosignatureV1 : .ed25519)
    }

    static func entry(_ index: Int) -> [UInt8] { Array("entry \(index)".utf8) }

    @Test(
        "appended in batches across tile edges (sizes 1, 255, 257, 65,536, 70,000), the folder's tiles equal x/mod's; entries read back; it reopens, and a changed tile is refused"
    )
    func logFolder() throws {
        let peer = try TransparencyTests.peer.get()
        let folder = try TemporaryDirectory()
        let key = try Self.key(0x42, name: "example.com/log")
        var log = try TransparencyLog.create(at: folder.path + "/log", key: key)
        #expect(log.checkpoint.size == 0 && log.checkpoint.rootHash == TileTree.sha256([]))
        for size in [1, 255, 257, 65_536, 70_000] {
            let next = try log.append((log.tree.size..<size).map(Self.entry))
            try log.publish(checkpoint: try SignedNote.sign(next.text, by: [key]))
            let theirs = try TemporaryDirectory()
            let ran = try run(peer, ["tiles", "\(size)", theirs.path])
            #expect(ran.status == 0 && ran.stdoutText.trimmingCharacters(in: .newlines) == next.rootHash.base64EncodedString(), "root of \(size)")
            let base = theirs.path + "/tile/8/"
            for case let relative as String in FileManager.default.enumerator(atPath: base)! {
                var isDirectory: ObjCBool = false
                guard FileManager.default.fileExists(atPath: base + relative, isDirectory: &isDirectory), !isDirectory.boolValue else { continue }
                let ours = try? Data(contentsOf: URL(fileURLWithPath: folder.path + "/log/tile/" + relative))
                #expect(ours == (try Data(contentsOf: URL(fileURLWithPath: base + relative))), "tile \(relative) at size \(size)")
            }
        }
        #expect(try log.entries(0..<3) == [Self.entry(0), Self.entry(1), Self.entry(2)])
        #expect(try log.entries(69_990..<70_000) == (69_990..<70_000).map(Self.entry))
        let reopened = try TransparencyLog(at: folder.path + "/log", key: key.verifier)
        #expect(reopened.tree.rootHash() == log.tree.rootHash() && reopened.checkpoint == log.checkpoint)
        // Another key, a changed tile: refused, not extended.
        #expect(throws: SignetError.self) { try TransparencyLog(at: folder.path + "/log", key: try Self.key(0x43, name: "example.com/log").verifier) }
        let tile = folder.path + "/log/tile/0/100"
        var bytes = try Data(contentsOf: URL(fileURLWithPath: tile))
        bytes[5] ^= 1
        try bytes.write(to: URL(fileURLWithPath: tile))
        #expect(throws: SignetError.self) { try TransparencyLog(at: folder.path + "/log", key: key.verifier) }
        // An entry bundle with a byte too many, or one entry short.
        let bundle = try Data(contentsOf: URL(fileURLWithPath: folder.path + "/log/tile/entries/000"))
        #expect(try TransparencyLog.bundleEntries(Array(bundle), count: 256, path: "b").count == 256)
        #expect(throws: SignetError.self) { try TransparencyLog.bundleEntries(Array(bundle) + [0], count: 256, path: "b") }
        #expect(throws: SignetError.self) { try TransparencyLog.bundleEntries(Array(bundle), count: 257, path: "b") }
    }

    @Test(
        "proofs built from tiles equal the tree's (consistency and inclusion, sizes 1 to 70,000); a partial tile gone is read from the full one; a tile a hash short or long is refused"
    )
    func tiledProofs() throws {
        var tree = TileTree()
        while tree.size < 70_000 { tree.append(leafHash: TileTree.leafHash(Self.entry(tree.size))) }
        // Tiles as a server holding the tree of `published` entries serves them.
        func server(_ published: Int, hidePartial: Bool = false, change: ((String, inout [UInt8]) -> Void)? = nil) -> (String) throws -> [UInt8]? {
            let tiles = Dictionary(uniqueKeysWithValues: tree.tiles(size: published).map { ($0.path, $0.data) })
            return { path in
                if hidePartial, path.contains(".p/") { return nil }
                guard var bytes = tiles[path] else { return nil }
                change?(path, &bytes)
                return bytes
            }
        }
        for (old, new) in [(1, 2), (1, 3), (255, 257), (256, 65_536), (4_097, 70_000), (69_999, 70_000), (70_000, 70_000)] {
            var tiled = TiledLog(size: new, fetch: server(new))
            #expect(try tiled.consistencyProof(old: old) == tree.consistencyProof(old: old, new: new), "\(old) → \(new)")
            #expect(try tiled.rootHash() == tree.rootHash(size: new))
            #expect(try tiled.inclusionProof(index: old - 1) == tree.inclusionProof(index: old - 1, size: new))
        }
        // 65,537 entries: the level-0 tile 256 is partial (1 hash); the server has only the full one.
        var fallback = TiledLog(size: 65_537, fetch: server(70_000, hidePartial: true))
        #expect(try fallback.consistencyProof(old: 300) == tree.consistencyProof(old: 300, new: 65_537))
        // The partial tile 0/001.p/2 one hash short, one hash long.
        for delta in [-32, 32] {
            var tiled = TiledLog(size: 258) { path in
                guard var bytes = try server(258)(path) else { return nil }
                if path == "tile/0/001.p/2" { bytes = delta < 0 ? Array(bytes.prefix(32)) : bytes + bytes.prefix(32) }
                return bytes
            }
            #expect(throws: SignetError.self, "\(delta)") { try tiled.consistencyProof(old: 257) }
        }
        // A changed hash gives a proof that does not verify against the two roots.
        var changed = TiledLog(size: 70_000, fetch: server(70_000) { path, bytes in if path == "tile/0/016" { bytes[33] ^= 1 } })
        let proof = try changed.consistencyProof(old: 4_097)
        #expect(
            !TileTree.verifyConsistency(old: 4_097, new: 70_000, oldRoot: tree.rootHash(size: 4_097), newRoot: tree.rootHash(size: 70_000), proof: proof))
    }

    /// A witness over a fresh state folder, the log's key and a log tree of 300 entries.
    struct WitnessFixture {
        let log = try! TransparencyLogTests.key(0x42, name: "example.com/log")
        let witnessKey = try! TransparencyLogTests.key(0x44, name: "w1.example", witness: true)
        let state = try! TemporaryDirectory()
        var tree = TileTree()
        var witness: TransparencyWitness { try! TransparencyWitness(key: witnessKey, logs: [log.verifier], stateDirectory: state.path) }

        init() { while tree.size < 300 { tree.append(leafHash: TileTree.leafHash(TransparencyLogTests.entry(tree.size))) } }

        func note(_ size: Int, origin: String = "example.com/log", by signer: NoteSignerKey? = nil, root: [UInt8]? = nil) throws -> [UInt8] {
            let checkpoint = try Checkpoint(origin: origin, size: UInt64(size), rootHash: root ?? tree.rootHash(size: size))
            return try SignedNote.sign(checkpoint.text, by: [signer ?? log])
        }

        /// `old N`, the proof (by default the tree's from N to the note's size), the note.
        func body(old: Int, _ note: [UInt8], proof: [[UInt8]]? = nil) -> [UInt8] {
            let size = Int(String(decoding: note, as: UTF8.self).split(separator: "\n")[1]) ?? 0
            let hashes = proof ?? (old > 0 && old <= size ? tree.consistencyProof(old: old, new: size) : [])
            return Array(("old \(old)\n" + hashes.map { $0.base64EncodedString() + "\n" }.joined() + "\n").utf8) + note
        }
    }

    @Test(
        "the witness answers as tlog-witness says: 200 and a cosignature that verifies, 409 with its size as text/x.tlog.size, 409 for the same size and another root, 422 for a bad proof, 404 for an unknown log, 403 for another key, 400 for malformed bodies; it never rolls back"
    )
    func witnessProtocol() throws {
        let f = WitnessFixture()
        let witness = f.witness
        // First contact: old 0, no proof.
        let first = witness.addCheckpoint(f.body(old: 0, try f.note(10)), now: 1_700_000_000)
        #expect(first.status == 200, "\(String(decoding: first.body, as: UTF8.self))")
        let cosigned = try SignedNote.open(try f.note(10) + first.body, known: [f.log.verifier, f.witnessKey.verifier])
        #expect(cosigned.verifiedBy.contains(f.witnessKey.verifier) && cosigned.cosignedAt[f.witnessKey.verifier] == 1_700_000_000)
        #expect(try witness.storedCheckpoint("example.com/log")?.size == 10)
        // Another old size: 409 with the size it holds.
        let stale = witness.addCheckpoint(f.body(old: 0, try f.note(20)), now: 1)
        #expect(stale.status == 409 && stale.contentType == "text/x.tlog.size" && stale.body == Array("10\n".utf8))
        // The right old size and proof: 200; the same checkpoint again: 200 (same size, same root).
        #expect(witness.addCheckpoint(f.body(old: 10, try f.note(257)), now: 2).status == 200)
        #expect(witness.addCheckpoint(f.body(old: 257, try f.note(257)), now: 3).status == 200)
        // Same size, another root: 409; a proof that does not verify: 422; nothing recorded.
        #expect(witness.addCheckpoint(f.body(old: 257, try f.note(257, root: Array(repeating: 1, count: 32)), proof: []), now: 4).status == 409)
        let badProof = f.tree.consistencyProof(old: 257, new: 300).map { $0.map { $0 ^ 1 } }
        #expect(witness.addCheckpoint(f.body(old: 257, try f.note(300), proof: badProof), now: 5).status == 422)
        let forked = try f.note(300, root: Array(repeating: 2, count: 32))
        #expect(witness.addCheckpoint(f.body(old: 257, forked, proof: f.tree.consistencyProof(old: 257, new: 300)), now: 6).status == 422)
        #expect(try witness.storedCheckpoint("example.com/log")?.size == 257)
        // A smaller checkpoint (a rollback) from the size it holds: 400 (old above the new).
        #expect(witness.addCheckpoint(f.body(old: 257, try f.note(200), proof: []), now: 7).status == 400)
        // Unknown origin: 404. Signed by another key under the log's name: 403.
        #expect(witness.addCheckpoint(f.body(old: 0, try f.note(5, origin: "other.example/log")), now: 8).status == 404)
        let impostor = try TransparencyLogTests.key(0x45, name: "example.com/log")
        #expect(witness.addCheckpoint(f.body(old: 257, try f.note(300, by: impostor)), now: 9).status == 403)
        // Malformed: no blank line, no old line, a leading zero, proof lines with old 0, 64 lines.
        let note = try f.note(300)
        for (why, body) in [
            ("no blank line", Array("old 257\n".utf8) + Array(note.prefix(20))), ("no old line", Array("\n".utf8) + note),
            ("leading zero", Array("old 0257\n\n".utf8) + note),
            ("proof from 0", Array("old 0\n\(Array(repeating: UInt8(0), count: 32).base64EncodedString())\n\n".utf8) + note),
            (
                "64 proof lines",
                Array(("old 257\n" + String(repeating: Array(repeating: UInt8(0), count: 32).base64EncodedString() + "\n", count: 64) + "\n").utf8) + note
            ),
            ("not base64", Array("old 257\n!!!\n\n".utf8) + note)
        ] {
            #expect(witness.addCheckpoint(body, now: 10).status == 400, "\(why)")
        }
        #expect(try witness.storedCheckpoint("example.com/log")?.size == 257)
        // The full 300 with a good proof: 200.
        #expect(witness.addCheckpoint(f.body(old: 257, note), now: 11).status == 200)
        // A record it cannot read is an error, not a log it never saw.
        let record = witness.statePath("example.com/log")
        try Data("garbage".utf8).write(to: URL(fileURLWithPath: record))
        #expect(witness.addCheckpoint(f.body(old: 0, try f.note(5)), now: 12).status == 500)
    }

    @Test(
        "policies: the specification's two-level example (2 of 3 X and any of Y); none; refusals: a name before its line, twice, a member twice, k out of range, no quorum, two, a log key as a witness's, a control character"
    )
    func policies() throws {
        let log = try Self.key(0x42, name: "example.com/log").verifier
        let x = try (1...3).map { try Self.key(UInt8(0x50 + $0), name: "x\($0).example", witness: true).verifier }
        let y = try (1...3).map { try Self.key(UInt8(0x60 + $0), name: "y\($0).example", witness: true).verifier }
        let text = """
            # two organisations
            log \(log) https://example.com/log/
            witness X1 \(x[0])
            witness X2 \(x[1])\thttps://x2.example/
            witness X3 \(x[2])
            group X-witnesses 2 X1 X2 X3

            witness Y1 \(y[0])
            witness Y2 \(y[1])
            witness Y3 \(y[2])
            group Y-witnesses any Y1 Y2 Y3
            group X-and-Y all X-witnesses Y-witnesses
            quorum X-and-Y

            """
        let policy = try TransparencyPolicy(text: text)
        #expect(policy.logs.map(\.url) == ["https://example.com/log/"] && policy.witnesses[1].url == "https://x2.example/")
        #expect(policy.isMet(by: [x[0], x[2], y[1]]) && policy.fewestCosigners == 3)
        #expect(!policy.isMet(by: [x[0], y[0], y[1], y[2]]) && !policy.isMet(by: [x[0], x[1], x[2]]))
        #expect(!policy.isMet(by: [x[0], log, y[1]]), "a key that is not a witness's counts for nothing")
        #expect(try TransparencyPolicy(text: "log \(log)\nquorum none\n").isMet(by: []))
        let single = try TransparencyPolicy(text: "log \(log)\nwitness A \(x[0])\nquorum A\n")
        #expect(single.isMet(by: [x[0]]) && !single.isMet(by: [x[1]]))
        for (why, bad) in [
            ("used before defined", "log \(log)\ngroup G 1 A\nwitness A \(x[0])\nquorum G\n"),
            ("defined twice", "log \(log)\nwitness A \(x[0])\nwitness A \(x[1])\nquorum A\n"),
            ("member twice", "log \(log)\nwitness A \(x[0])\ngroup G 1 A A\nquorum G\n"),
            ("member of two groups", "log \(log)\nwitness A \(x[0])\ngroup G any A\ngroup H all G A\nquorum H\n"),
            ("k = 0", "log \(log)\nwitness A \(x[0])\ngroup G 0 A\nquorum G\n"),
            ("k > n", "log \(log)\nwitness A \(x[0])\ngroup G 2 A\nquorum G\n"),
            ("no quorum", "log \(log)\nwitness A \(x[0])\n"), ("two quorums", "log \(log)\nwitness A \(x[0])\nquorum A\nquorum none\n"),
            ("a witness with a log's key type", "log \(log)\nwitness A \(log)\nquorum A\n"),
            ("the same witness key twice", "log \(log)\nwitness A \(x[0])\nwitness B \(x[0])\nquorum A\n"),
            ("a control character", "log \(log)\nquorum none\u{1}\n"), ("unknown keyword", "log \(log)\nwitnesses A\nquorum none\n"),
            ("no log", "quorum none\n"), ("none as a member", "log \(log)\nwitness A \(x[0])\ngroup G 1 none\nquorum G\n")
        ] {
            #expect(throws: SignetError.self, "\(why)") { try TransparencyPolicy(text: bad) }
        }
    }
}
