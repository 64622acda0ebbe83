import Foundation
import SignetTestSupport
import Testing

/// Encrypted packages read over range requests (FORMAT.md §8, "Updates"): an update of an
/// encrypted package fetches the records that hold what the device lacks, against a real nginx,
/// byte for byte against the same update of the package in the clear.
@Suite("Encrypted packages over range requests: only the records of what a device lacks", .serialized)
struct EncryptedUpdateCLITests {
    nonisolated(unsafe) static let shared = Result { try HTTPSServer.site("EncryptedUpdateCLITests") }
    static let cert = EncryptionCLITests.rsaCert, key = EncryptionCLITests.rsaKey

    /// `count` bytes of text (random bytes in hex, from openssl): deflate halves it, and a
    /// change stays where it is made.
    static func text(_ count: Int) throws -> Data {
        let hex = try run("openssl", ["rand", "-hex", "\(count / 2)"])
        guard hex.status == 0 else { throw SupportError(hex.stderr) }
        return hex.stdout.prefix(count)
    }

    /// Packs `tree` as release `sequence` into `plain` and seals it to the test device into `encrypted`.
    static func release(_ work: Workspace, _ tree: TemporaryDirectory, sequence: Int, plain: String, encrypted: String) throws {
        try ChunkedUpdateCLITests.pack(work, tree.path, sequence: sequence, out: plain)
        try? FileManager.default.removeItem(atPath: encrypted)
        let sealed = try CLI.run(["encrypt", plain, "--to", cert, "--out", encrypted])
        guard sealed.status == 0 else { throw SupportError("encrypt failed: \(sealed.stderr)") }
    }

    @Test(
        "1 MiB changed inside a 24 MiB compressible file: the encrypted update moves at most 1.1 × the bytes of the same update in the clear (nginx's log), the tree the same, every file verified"
    )
    func delta() throws {
        let server = try Self.shared.get()
        let work = try Workspace()
        let tree = try TemporaryDirectory()
        try FileManager.default.createDirectory(atPath: tree.file("data"), withIntermediateDirectories: true)
        var text = try Self.text(24 << 20)
        _ = try tree.write("data/big.txt", text)
        _ = try tree.write("version.txt", Data("1\n".utf8))
        _ = try tree.write("notes.txt", Data(String(repeating: "unchanged\n", count: 1_000).utf8))
        for folder in ["plain", "sealed"] { try FileManager.default.createDirectory(atPath: server.www + "/" + folder, withIntermediateDirectories: true) }
        let plain = server.www + "/plain/app.zip", sealed = server.www + "/sealed/app.zip"
        try Self.release(work, tree, sequence: 1, plain: plain, encrypted: sealed)
        let plainDest = work.directory.file("plain"), sealedDest = work.directory.file("sealed")
        func unpack(_ path: String, _ dest: String, _ extra: [String] = []) throws -> ProcessResult {
            try CLI.run(["unpack", server.url(path), "--dest", dest, "--pubkey", work.publicDER, "--tls-ca", server.root, "--json"] + extra)
        }
        #expect(try unpack("plain/app.zip", plainDest).status == 0)
        let first = try unpack("sealed/app.zip", sealedDest, ["--decryption-key", Self.key])
        #expect(first.status == 0, "\(first.stderr)")
        #expect((try first.json()["transfer"] as? [String: Any])?["mode"] as? String == "ranges", "\(first.stdoutText)")

        text.replaceSubrange((12 << 20)..<(13 << 20), with: try Self.text(1 << 20))
        _ = try tree.write("data/big.txt", text)
        _ = try tree.write("version.txt", Data("2\n".utf8))
        try Self.release(work, tree, sequence: 2, plain: plain, encrypted: sealed)
        var moved: [String: Int] = [:]
        for (path, dest, extra) in [("plain/app.zip", plainDest, []), ("sealed/app.zip", sealedDest, ["--decryption-key", Self.key])] {
            let offset = server.accessLogSize
            let update = try unpack(path, dest, extra)
            #expect(update.status == 0, "\(path): \(update.stderr)")
            let transfer = try #require(try update.json()["transfer"] as? [String: Any], "\(update.stdoutText)")
            let logged = try server.answers(of: path, from: offset)
            moved[path] = logged.reduce(0) { $0 + $1.bytes }
            #expect(logged.count == transfer["requests"] as? Int && moved[path] == transfer["bytes_downloaded"] as? Int, "\(logged) \(transfer)")
            #expect(try contents(dest + "/data/big.txt") == text && (try contents(dest + "/version.txt")) == Data("2\n".utf8))
            #expect(try CLI.run(["reverify", dest, "--pubkey", work.publicDER]).status == 0)
        }
        let inClear = try #require(moved["plain/app.zip"]), encrypted = try #require(moved["sealed/app.zip"])
        // An update, not a download: the changed MiB deflated, with the chunks around it.
        #expect(inClear < 2 << 20, "\(moved)")
        #expect(encrypted * 10 <= inClear * 11, "encrypted \(encrypted) bytes, in the clear \(inClear)")
    }

    /// The byte ranges of a request's Range header as the scripted server logged it
    /// (`PATH bytes=A-B,C-D`; a suffix `-N` of a `size`-byte file).
    static func ranges(_ logged: String, size: Int) -> [Range<Int>] {
        guard let header = logged.split(separator: " ").last, header.hasPrefix("bytes=") else { return [0..<size] }
        return header.dropFirst(6).split(separator: ",").compactMap { spec in
            let ends = spec.split(separator: "-", omittingEmptySubsequences: false)
            guard ends.count == 2 else { return nil }
            if ends[0].isEmpty, let suffix = Int(ends[1]) { return max(0, size - suffix)..<size }
            guard let start = Int(ends[0]) else { return nil }
            return start..<min(size, (Int(ends[1]) ?? (size - 1)) + 1)
        }
    }

    @Test(
        "a download cut half-way through an 8 MiB file (with a chunk index and without): the next run asks again for at most one record more of what the first received than the same runs in the clear",
        arguments: ["indexed", "unindexed"])
    func cutResumes(_ kind: String) throws {
        let work = try Workspace()
        let image = CLIHelpers.randomData(8 << 20)
        let plain = work.directory.file("plain.zip"), sealed = work.directory.file("sealed.zip")
        try CLIHelpers.pack(
            work, ["image.bin": image, "small.txt": Data("small\n".utf8)], sequence: 1, out: plain,
            extra: kind == "unindexed" ? ["--chunk-threshold", "0"] : [])
        let sealedRun = try CLI.run(["encrypt", plain, "--to", Self.cert, "--out", sealed])
        try #require(sealedRun.status == 0, "\(sealedRun.stderr)")
        // Where the image's bytes are: in the package, and in the encrypted one (the record
        // holding each plaintext byte: 56 bytes of header, then 16,400 per 16 KiB).
        let imageAt = try #require(try DamagedTransfersCLITests.offsets(plain)["image.bin"])
        let payloadAt = try #require(try DamagedTransfersCLITests.offsets(sealed)["signet-encrypted/payload"])
        func inSealed(_ offset: Int) -> Int { payloadAt + 56 + offset / 16_384 * 16_400 + offset % 16_384 }
        var refetched: [String: Int] = [:]
        for (name, package, start, cut) in [
            ("plain", plain, imageAt, imageAt + (4 << 20)), ("sealed", sealed, inSealed(imageAt), inSealed(imageAt + (4 << 20)))
        ] {
            let server = try ScriptedServer(script: ["app.zip": [.init(headers: ["ETag": "\"v1\""], honourRange: true, cutAt: cut)]])
            try FileManager.default.copyItem(atPath: package, toPath: server.file("app.zip"))
            let size = try #require(try FileManager.default.attributesOfItem(atPath: package)[.size] as? Int)
            let dest = work.directory.file("dest-" + name)
            let arguments =
                ["unpack", server.url("app.zip"), "--dest", dest, "--pubkey", work.publicDER, "--allow-http", "--retries", "0", "--json"]
                + (name == "sealed" ? ["--decryption-key", Self.key] : [])
            let first = try CLI.run(arguments)
            #expect(first.status == 5 && CLIHelpers.errorCode(first) == "network-error", "\(name): \(first.stderr)")
            let before = server.requests.count
            try server.replace(script: ["app.zip": [.init(headers: ["ETag": "\"v1\""], honourRange: true)]])
            let done = try CLI.run(arguments)
            #expect(done.status == 0, "\(name): \(done.stderr)")
            #expect(try contents(dest + "/image.bin") == image)
            // What the second run asked for again of the image's bytes the first had received.
            refetched[name] = server.requests.dropFirst(before).flatMap { Self.ranges($0, size: size) }.reduce(0) {
                $0 + max(0, min($1.upperBound, cut) - max($1.lowerBound, start))
            }
        }
        let inClear = try #require(refetched["plain"]), encrypted = try #require(refetched["sealed"])
        #expect(encrypted <= inClear + 16_400, "encrypted \(encrypted) bytes asked for again, in the clear \(inClear)")
    }

    @Test(
        "TUF lists an encrypted package like any other: repo add reads its manifest through a publisher's key (without one, exit 3), a device updates over ranges with its own (another device's key: exit 3, DIR unchanged); repo resign after a key rotation re-signs it inside, and the device moves to it fetching no file"
    )
    func tuf() throws {
        let p = try UpdateCLITests.Publisher("encrypted-tuf")
        func update(_ key: String) throws -> ProcessResult {
            try CLI.run(
                [
                    "update", "--repository", p.metadataURL, "--tuf-metadata", p.metadata, "--channel", "stable", "--dest", p.dest,
                    "--tls-ca", p.server.root, "--state", p.state, "--decryption-key", key, "--json"
                ])
        }
        for sequence in 1...2 {
            let tree = try TemporaryDirectory()
            _ = try tree.write("a.txt", Data("release \(sequence)\n".utf8))
            _ = try tree.write("weights.bin", CLIHelpers.randomData(300_000))
            let plain = p.work.directory.file("app-\(sequence).zip"), sealed = p.work.directory.file("app-\(sequence).enc.zip")
            try p.check(CLI.run(["pack", tree.path, "--name", "app", "--version", "1.\(sequence)", "--sequence", "\(sequence)", "--out", plain] + p.key))
            // Sealed to the device and to the publisher, whose key lets repo add read it.
            try p.check(CLI.run(["encrypt", plain, "--to", Self.cert, "--to", EncryptionCLITests.ecCert, "--out", sealed]))
            if sequence == 1 {
                let refused = try CLI.run(["repo", "add", p.repo, sealed, "--channel", "stable"] + p.key)
                #expect(refused.status == 3 && refused.stderr.contains("--decryption-key"), "\(refused.stderr)")
            }
            let added = try p.check(
                CLI.run(["repo", "add", p.repo, sealed, "--channel", "stable", "--decryption-key", EncryptionCLITests.ecKey, "--json"] + p.key))
            #expect(try added.json()["sequence"] as? Int == sequence, "the target binds the manifest inside: \(added.stdoutText)")
            try p.check(
                CLI.run([
                    "repo", "refresh", p.repo, "--snapshot-key", p.work.privatePEM, "--timestamp-key", p.work.privatePEM, "--passphrase-file", p.work.passFile
                ]))
            if sequence == 2 {
                let other = try update(EncryptionCLITests.otherKey)
                #expect(other.status == 3 && p.installedText() == "release 1\n", "\(other.stderr)")
            }
            let updated = try update(Self.key)
            #expect(updated.status == 0 && p.installedText() == "release \(sequence)\n", "\(updated.stderr)")
            #expect(updated.stdoutText.contains("\"ranges\""), "read with range requests: \(updated.stdoutText)")
            #expect(try CLI.run(["reverify", p.dest, "--pubkey", p.work.publicDER]).status == 0)
        }
        // The targets key that packed it rotated out: repo resign re-signs the package inside
        // (through the publisher's key) and seals it again for the same devices, which move to
        // it without fetching a file.
        let newKey = try Workspace()
        let rotated = try p.check(CLI.run(["repo", "rotate", p.repo, "--role", "targets", "--add", newKey.publicDER, "--remove", p.work.publicDER, "--json"]))
        try p.check(CLI.run(["repo", "sign", p.repo, "--role", "root", "--digest", try #require(try rotated.json()["digest"] as? String)] + p.key))
        let resign = ["repo", "resign", p.repo, "app-2.enc.zip", "--key", newKey.privatePEM, "--passphrase-file", newKey.passFile]
        let keyless = try CLI.run(resign)
        #expect(keyless.status == 3 && keyless.stderr.contains("--decryption-key"), "\(keyless.stderr)")
        try p.check(CLI.run(resign + ["--decryption-key", EncryptionCLITests.ecKey]))
        try p.check(
            CLI.run([
                "repo", "refresh", p.repo, "--snapshot-key", p.work.privatePEM, "--timestamp-key", p.work.privatePEM, "--passphrase-file", p.work.passFile
            ]))
        let moved = try update(Self.key)
        #expect(moved.status == 0 && p.installedText() == "release 2\n", "\(moved.stderr)")
        #expect((try moved.json()["transfer"] as? [String: Any])?["files_fetched"] as? Int == 0, "\(moved.stdoutText)")
        #expect(try CLI.run(["reverify", p.dest, "--pubkey", newKey.publicDER]).status == 0, "signed by the new key now")
    }
}
