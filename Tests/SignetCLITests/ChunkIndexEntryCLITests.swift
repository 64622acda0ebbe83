import Foundation
import Testing
import SignetTestSupport

/// Issue 51, point 2: the chunk indexes out of the manifest, in a stored entry read by range.
@Suite("The chunk-index entry: read by range, bound by the manifest; older packages still install")
struct ChunkIndexEntryCLITests {
    /// Rewrites `package` as a package made before the entry (indexes inline, the manifest
    /// signed again by openssl): chunk_index.py's `to_inline`.
    static func older(_ work: Workspace, _ package: String, out: String) throws {
        let script = "import sys; sys.path.insert(0, sys.argv[1]); import chunk_index; chunk_index.to_inline(*sys.argv[2:])"
        let result = try run(try which("python3"), ["-c", script, ChunkedUpdateCLITests.here, package, out, work.privatePEM, work.passFile])
        guard result.status == 0 else { throw SupportError("to_inline: \(result.stderr)") }
    }

    @Test(
        "older packages (inline indexes, made here by Python and openssl) verify, install and update to and from packages with the entry; the manifest of a 16 MiB file stays small; an altered entry is refused by inspect and by an update (modified, naming it), DIR unchanged"
    )
    func olderAndAltered() throws {
        let server = try ChunkedUpdateCLITests.shared.get()
        let work = try Workspace()
        let tree = try TemporaryDirectory()
        let original = try tree.writeRandom("big.img", count: 16 << 20)
        _ = try tree.write("version.txt", Data("1\n".utf8))
        try FileManager.default.createDirectory(atPath: server.www + "/older", withIntermediateDirectories: true)
        let served = server.www + "/older/app.zip", made = work.directory.file("made.zip")
        try ChunkedUpdateCLITests.pack(work, tree.path, sequence: 1, out: made)
        // The entry keeps the manifest small: 16 MiB of chunk records and hints are not in it.
        let manifest = try run("unzip", ["-p", made, ".signet/manifest.json"])
        #expect(manifest.stdout.count < 2_000 && String(decoding: manifest.stdout, as: UTF8.self).contains("\"chunk_index\""), "\(manifest.stdout.count) bytes")
        try Self.older(work, made, out: served)
        #expect(try CLI.run(["inspect", served, "--pubkey", work.publicDER]).status == 0)
        let dest = work.directory.file("app")
        let unpack = ["unpack", server.url("older/app.zip"), "--dest", dest, "--pubkey", work.publicDER, "--tls-ca", server.root, "--json"]
        let first = try CLI.run(unpack)
        #expect(first.status == 0, "\(first.stderr)")

        var bytes = try contents(original)
        func update(_ sequence: Int, older: Bool) throws {
            bytes.insert(contentsOf: Data(try randomBytes(256 << 10)), at: sequence << 20)
            try bytes.write(to: URL(fileURLWithPath: original))
            try ChunkedUpdateCLITests.pack(work, tree.path, sequence: sequence, out: made)
            if older {
                try Self.older(work, made, out: served)
            } else {
                try FileManager.default.removeItem(atPath: served); try FileManager.default.copyItem(atPath: made, toPath: served)
            }
            let result = try CLI.run(unpack)
            #expect(result.status == 0, "\(result.stderr)")
            #expect(try contents(dest + "/big.img") == bytes)
            let transfer = try #require(try result.json()["transfer"] as? [String: Any], "\(result.stdoutText)")
            // From an installed release without an index of its own (its indexes were in the
            // entry), or from one whose blocks are hashed another way: the installed file is read.
            #expect(
                (transfer["chunk_bytes_reused"] as? Int ?? 0) >= (16 << 20) - 4 * (256 << 10)
                    && (transfer["bytes_downloaded"] as? Int ?? .max) < 2 << 20, "sequence \(sequence): \(transfer)")
        }
        try update(2, older: false) // inline-indexed release installed, the new one with the entry
        try update(3, older: true) // and back
        try update(4, older: false)
        #expect(try CLI.run(["reverify", dest, "--pubkey", work.publicDER]).status == 0)

        // The entry altered on the server (a byte of the hint of the block that changed): the
        // manifest's slice hash catches it, whether the whole package is checked or an update
        // reads that slice by range.
        bytes.replaceSubrange((15 << 20)..<((15 << 20) + 100), with: Data(repeating: 0x42, count: 100))
        try bytes.write(to: URL(fileURLWithPath: original))
        try ChunkedUpdateCLITests.pack(work, tree.path, sequence: 5, out: made)
        let alter = pythonScript("chunk_index_entry_alter.py")
        let python = try run(try which("python3"), ["-c", alter, made])
        try #require(python.status == 0, "\(python.stderr)")
        let inspected = try CLI.run(["inspect", made, "--pubkey", work.publicDER])
        #expect(inspected.status == 1 && inspected.stderr.contains("chunk-index") && inspected.stderr.contains("does not match"), "\(inspected.stderr)")
        try FileManager.default.removeItem(atPath: served)
        try FileManager.default.copyItem(atPath: made, toPath: served)
        let before = try contents(dest + "/big.img")
        let refused = try CLI.run(unpack)
        #expect(refused.status == 1 && refused.stderr.contains("chunk-index"), "\(refused.stderr)")
        #expect(try contents(dest + "/big.img") == before)
        let beside = try FileManager.default.contentsOfDirectory(atPath: work.path).filter {
            $0.hasPrefix(".app.") && ($0.contains("staging") || $0.contains("salvage"))
        }
        #expect(beside.isEmpty, "\(beside)")
    }
}
