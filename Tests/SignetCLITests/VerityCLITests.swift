import Foundation
import Testing
import SignetTestSupport

/// Issue 52, point 2 (its host part): `pack --verity` records each file's fs-verity digest in
/// the signed manifest.
@Suite("pack --verity: fs-verity digests in the manifest")
struct VerityCLITests {
    @Test(
        "each file's verity digest is what fsverity digest says of it (empty, small, chunked and deflated files); without --verity there is none; such a package installs as any other"
    )
    func packRecordsDigests() throws {
        let work = try Workspace()
        let tree = try TemporaryDirectory()
        _ = try tree.write("empty", Data())
        _ = try tree.write("notes.txt", Data(String(repeating: "compressible text\n", count: 400_000).utf8))
        _ = try tree.writeRandom("image.img", count: (5 << 20) + 123)
        _ = try tree.writeRandom("small.bin", count: 4097)
        let package = work.directory.file("app.zip")
        try ChunkedUpdateCLITests.pack(work, tree.path, sequence: 1, out: package, ["--verity"])
        let manifest = try JSONSerialization.jsonObject(with: try run("unzip", ["-p", package, ".signet/manifest.json"]).stdout) as? [String: Any]
        let files = try #require(manifest?["files"] as? [[String: Any]])
        #expect(files.count == 4)
        for file in files {
            let path = try #require(file["path"] as? String)
            let reference = try run(try which("fsverity"), ["digest", tree.file(path)])
            let expected = String(reference.stdoutText.split(separator: " ").first?.dropFirst("sha256:".count) ?? "")
            #expect(file["verity"] as? String == expected && expected.count == 64, "\(path): \(file["verity"] ?? "none") against \(expected)")
        }
        #expect(try CLI.run(["inspect", package, "--pubkey", work.publicDER]).status == 0)
        #expect(try CLI.run(["unpack", package, "--dest", work.directory.file("app"), "--pubkey", work.publicDER]).status == 0)
        let plain = work.directory.file("plain.zip")
        try ChunkedUpdateCLITests.pack(work, tree.path, sequence: 1, out: plain)
        #expect(!String(decoding: try run("unzip", ["-p", plain, ".signet/manifest.json"]).stdout, as: UTF8.self).contains("\"verity\""))
    }

    /// Whether this machine's temporary filesystem takes fs-verity files (`fsverity enable`, the
    /// reference tool): the kernel and the filesystem both must. CI's and this project's
    /// machines answer no; the VM suite's guest answers yes (scripts/vm, ext4 -O verity).
    @Test(
        "a package whose signed fs-verity digest does not match its file is refused by inspect, repo add and every install without --verity — streamed, shared with DIR, or copied from DIR over ranges (modified, naming the file), checked in the same read; the honest one verifies"
    )
    func wrongDigestRefused() throws {
        let work = try Workspace()
        let tree = try TemporaryDirectory()
        _ = try tree.write("a.txt", Data("alpha\n".utf8))
        _ = try tree.writeRandom("b.bin", count: 9_000)
        let package = work.directory.file("app.zip")
        try ChunkedUpdateCLITests.pack(work, tree.path, sequence: 1, out: package, ["--verity", "--chunk-threshold", "4096"])
        #expect(try CLI.run(["inspect", package, "--pubkey", work.publicDER]).status == 0)
        let forged = work.directory.file("forged.zip")
        try Self.forgeVerity(of: "b.bin", in: package, out: forged, work: work)
        let inspected = try CLI.run(["inspect", forged, "--pubkey", work.publicDER])
        #expect(
            inspected.status == 1 && inspected.stderr.contains("'b.bin' does not match the fs-verity digest"), "\(inspected.stdoutText) \(inspected.stderr)")
        let site = work.directory.file("site")
        #expect(try CLI.run(["repo", "init", site, "--key", work.privatePEM, "--passphrase-file", work.passFile]).status == 0)
        let added = try CLI.run(["repo", "add", site, forged, "--channel", "stable"])
        #expect(added.status != 0 && added.stderr.contains("fs-verity digest"), "\(added.stderr)")
        // Installs without --verity. Streamed from the package into an empty DIR:
        let fresh = work.directory.file("fresh")
        let streamed = try CLI.run(["unpack", forged, "--dest", fresh, "--pubkey", work.publicDER])
        #expect(streamed.status == 1 && streamed.stderr.contains("'b.bin' does not match the fs-verity digest"), "\(streamed.stderr)")
        #expect(!FileManager.default.fileExists(atPath: fresh))
        // An update whose b.bin is unchanged, so taken from DIR (shared, or copied over ranges)
        // rather than streamed: its digest is checked in that read too.
        _ = try tree.write("a.txt", Data("alpha 2\n".utf8))
        let second = work.directory.file("app-2.zip"), forgedSecond = work.directory.file("forged-2.zip")
        try ChunkedUpdateCLITests.pack(work, tree.path, sequence: 2, out: second, ["--verity", "--chunk-threshold", "4096"])
        try Self.forgeVerity(of: "b.bin", in: second, out: forgedSecond, work: work)
        let dest = work.directory.file("app")
        #expect(try CLI.run(["unpack", package, "--dest", dest, "--pubkey", work.publicDER]).status == 0)
        let shared = try CLI.run(["unpack", forgedSecond, "--dest", dest, "--pubkey", work.publicDER])
        #expect(shared.status == 1 && shared.stderr.contains("'b.bin' does not match the fs-verity digest"), "\(shared.stderr)")
        #expect(try String(contentsOfFile: dest + "/a.txt", encoding: .utf8) == "alpha\n", "DIR as it was")
        let server = try RangedUpdateCLITests.shared.get()
        try FileManager.default.createDirectory(atPath: server.www + "/verity-forged", withIntermediateDirectories: true)
        let served = server.www + "/verity-forged/\(UUID().uuidString.prefix(8)).zip"
        try FileManager.default.copyItem(atPath: forgedSecond, toPath: served)
        let ranged = try RangedUpdateCLITests.unpack(server, String(served.dropFirst(server.www.count + 1)), work, dest: dest)
        #expect(ranged.status == 1 && ranged.stderr.contains("'b.bin' does not match the fs-verity digest"), "\(ranged.stderr)")
        #expect((try ranged.json()["error"] as? [String: Any])?["code"] as? String == "modified", "\(ranged.stdoutText)")
        #expect(try String(contentsOfFile: dest + "/a.txt", encoding: .utf8) == "alpha\n", "DIR as it was")
        #expect(try CLI.run(["unpack", second, "--dest", dest, "--pubkey", work.publicDER]).status == 0, "the honest update installs")
        // A changed chunked file rebuilt over ranges from DIR's chunks and the package's: its
        // digest is checked as it is assembled.
        var image = try Data(contentsOf: URL(fileURLWithPath: tree.file("b.bin")))
        image.replaceSubrange(4_000..<4_100, with: Data(repeating: 0x41, count: 100))
        _ = try tree.write("b.bin", image)
        let third = work.directory.file("app-3.zip"), forgedThird = work.directory.file("forged-3.zip")
        try ChunkedUpdateCLITests.pack(work, tree.path, sequence: 3, out: third, ["--verity", "--chunk-threshold", "4096"])
        try Self.forgeVerity(of: "b.bin", in: third, out: forgedThird, work: work)
        try FileManager.default.copyItem(atPath: forgedThird, toPath: served + ".3")
        let rebuilt = try RangedUpdateCLITests.unpack(server, String(served.dropFirst(server.www.count + 1)) + ".3", work, dest: dest)
        #expect(rebuilt.status == 1 && rebuilt.stderr.contains("'b.bin' does not match the fs-verity digest"), "\(rebuilt.stderr)")
        #expect(try String(contentsOfFile: dest + "/a.txt", encoding: .utf8) == "alpha 2\n", "DIR as it was")
    }

    /// The publisher's mistake, made by hand: `path`'s fs-verity digest changed in `package`'s
    /// manifest, which is signed again (openssl dgst, as signet signs), every other entry as it was.
    static func forgeVerity(of path: String, in package: String, out forged: String, work: Workspace) throws {
        let script = pythonScript("verity_repack.py")
        let made = try SignetTestSupport.run("python3", ["-c", script, package, forged, work.privatePEM, work.passFile, path])
        try #require(made.status == 0, "\(made.stderr)")
    }

    static func hostTakesVerity(_ directory: TemporaryDirectory) throws -> Bool {
        let probe = try directory.write("verity-probe", Data("probe".utf8))
        return try run(try which("fsverity"), ["enable", probe]).status == 0
    }

    @Test(
        "unpack --verity: refused before anything is written where the filesystem has no fs-verity (or, where it has, each file measures as the manifest says); --verity-auto installs and says why not; a package packed without digests is refused by --verity"
    )
    func unpackVerity() throws {
        let work = try Workspace()
        let tree = try TemporaryDirectory()
        _ = try tree.write("tool.sh", Data("#!/bin/sh\necho ok\n".utf8))
        _ = try tree.writeRandom("data.bin", count: 9000)
        let package = work.directory.file("app.zip"), plain = work.directory.file("plain.zip")
        try ChunkedUpdateCLITests.pack(work, tree.path, sequence: 1, out: package, ["--verity"])
        try ChunkedUpdateCLITests.pack(work, tree.path, sequence: 1, out: plain)
        let dest = work.directory.file("app")
        let strict = try CLI.run(["unpack", package, "--dest", dest, "--pubkey", work.publicDER, "--verity", "--json"])
        if try Self.hostTakesVerity(work.directory) {
            #expect(strict.status == 0, "\(strict.stderr)")
            for path in ["tool.sh", "data.bin"] {
                let measured = try run(try which("fsverity"), ["measure", dest + "/" + path]).stdoutText
                let digest = try run(try which("fsverity"), ["digest", tree.file(path)]).stdoutText
                #expect(measured.split(separator: " ").first == digest.split(separator: " ").first, "\(path): \(measured) against \(digest)")
            }
        } else {
            #expect(strict.status == 5, "\(strict.stderr)")
            #expect(strict.stderr.contains("does not take fs-verity files") && strict.stderr.contains("--verity-auto"), "\(strict.stderr)")
            #expect((try strict.json()["error"] as? [String: Any])?["code"] as? String == "verity-unsupported", "\(strict.stdoutText)")
            #expect(!FileManager.default.fileExists(atPath: dest), "nothing is written")
            #expect(
                try FileManager.default.contentsOfDirectory(atPath: work.path).allSatisfy { !$0.contains("signet-staging") && !$0.hasPrefix(".app") },
                "no staging is left")
            let auto = try CLI.run(["unpack", package, "--dest", dest, "--pubkey", work.publicDER, "--verity-auto", "--json"])
            #expect(auto.status == 0, "\(auto.stderr)")
            let verity = try #require(try auto.json()["verity"] as? [String: Any])
            #expect(verity["enabled"] as? Int == 0 && (verity["not_used"] as? String)?.contains("does not take fs-verity files") == true, "\(verity)")
            let text = try CLI.run(["unpack", package, "--dest", work.directory.file("app2"), "--pubkey", work.publicDER, "--verity-auto"])
            #expect(text.status == 0 && text.stdoutText.contains("fs-verity: not used: the filesystem of"), "\(text.stdoutText)")
        }
        // Without the digests, --verity refuses before anything is written (usage, exit 2) and
        // --verity-auto says why it did not use fs-verity.
        let other = work.directory.file("other")
        let unsigned = try CLI.run(["unpack", plain, "--dest", other, "--pubkey", work.publicDER, "--verity"])
        #expect(unsigned.status == 2 && unsigned.stderr.contains("pack --verity"), "\(unsigned.stderr)")
        #expect(!FileManager.default.fileExists(atPath: other))
        let fallback = try CLI.run(["unpack", plain, "--dest", other, "--pubkey", work.publicDER, "--verity-auto", "--json"])
        #expect(fallback.status == 0)
        #expect(
            ((try fallback.json()["verity"] as? [String: Any])?["not_used"] as? String)?.contains("pack it with signet pack --verity") == true,
            "\(fallback.stdoutText)")
    }

    @Test(
        "key show --ima-cert: the certificate's subject key identifier ends in the key id of unpack --ima's signatures and of evmctl's --keyid-from-cert; evmctl verifies the installed files with it"
    )
    func imaCertificate() throws {
        let work = try Workspace()
        let certificate = work.directory.file("ima.der")
        let shown = try CLI.run(["key", "show", work.privatePEM, "--passphrase-file", work.passFile, "--ima-cert", certificate, "--json"])
        #expect(shown.status == 0, "\(shown.stderr)")
        let keyID = try #require(try shown.json()["ima_keyid"] as? String)
        #expect(keyID.count == 8)
        // What OpenSSL reads in it: an end-entity code-signing certificate, its SKID ending in the id.
        let text = try work.openssl([
            "x509", "-inform", "DER", "-in", certificate, "-noout", "-ext", "subjectKeyIdentifier,basicConstraints,keyUsage,extendedKeyUsage"
        ]).stdoutText
        let skid = text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.first { $0.count == 59 && $0.filter { $0 == ":" }.count == 19 }
        #expect(skid.map { $0.replacingOccurrences(of: ":", with: "").lowercased().hasSuffix(keyID) } == true, "\(text)")
        #expect(text.contains("CA:FALSE") && text.contains("Digital Signature") && text.contains("Code Signing"), "\(text)")
        // The same id in the attribute unpack --ima writes, and in evmctl's own signature.
        let tree = try TemporaryDirectory()
        _ = try tree.write("app.conf", Data("port = 8080\n".utf8))
        let package = work.directory.file("app.zip")
        try ChunkedUpdateCLITests.pack(work, tree.path, sequence: 1, out: package)
        let dest = work.directory.file("app")
        #expect(try CLI.run(["unpack", package, "--dest", dest, "--pubkey", work.publicDER, "--ima", "user"]).status == 0)
        let attribute = try run("getfattr", ["--only-values", "-n", "user.ima", dest + "/app.conf"]).stdout
        #expect(attribute.count > 9 && Data(attribute[3..<7]).map { String(format: "%02x", $0) }.joined() == keyID)
        let evmctl = try which("evmctl")
        let verified = try run(evmctl, ["ima_verify", "--xattr-user", "--key", certificate, dest + "/app.conf"])
        #expect(verified.status == 0, "\(verified.stdoutText) \(verified.stderr)")
        let plainKey = work.directory.file("plain.pem")
        _ = try work.openssl(["pkey", "-in", work.privatePEM, "-passin", "file:" + work.passFile, "-out", plainKey])
        let signed = try tree.write("signed-by-evmctl", Data("x".utf8))
        let byEvmctl = try run(evmctl, ["ima_sign", "--xattr-user", "--key", plainKey, "--keyid-from-cert", certificate, signed])
        #expect(byEvmctl.status == 0, "\(byEvmctl.stderr)")
        let theirs = try run("getfattr", ["--only-values", "-n", "user.ima", signed]).stdout
        #expect(theirs.count > 9 && Data(theirs[3..<7]).map { String(format: "%02x", $0) }.joined() == keyID)
        // A public key alone cannot sign a certificate.
        let refused = try CLI.run(["key", "show", work.publicDER, "--ima-cert", work.directory.file("other.der")])
        #expect(refused.status == 4 && refused.stderr.contains("private key"), "\(refused.stderr)")
    }
}
