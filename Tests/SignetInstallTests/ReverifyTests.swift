import Foundation
import Testing
@testable import SignetCore
@testable import SignetCrypto
@testable import SignetManifest
@testable import SignetReverify
@testable import SignetArchive
@testable import SignetNetwork
@testable import SignetPackage
@testable import SignetInstall
import SignetTestSupport
import SignetCryptoTestSupport
import SignetPackageTestSupport
import SystemPackage

@Suite("Re-verification from extended attributes")
struct ReverifyTests {
    /// A tree installed by unpack from the pack tests' sample tree.
    static func installed(_ directory: TemporaryDirectory, ima: String? = nil, at dest: String? = nil) throws -> String {
        let root = try PackageFixture.tree(in: directory)
        let package = directory.file("p.zip")
        _ = try PackageBuilder.pack(
            [root], to: package, signer: Signer(key: Fixtures.signingKey()), options: PackOptions(name: "assets", version: "3.1", sequence: 31))
        let target = dest ?? directory.file("app")
        var options = InstallOptions()
        options.imaAttribute = ima
        _ = try Installer.install(package, to: target, policy: Fixtures.trust("rsa2048-spki.der"), options: options)
        return target
    }

    static var policy: TrustPolicy { get throws { try Fixtures.trust("rsa2048-spki.der") } }

    static func verdicts(_ report: TreeReport) -> [String: String] {
        Dictionary(uniqueKeysWithValues: report.files.map { ($0.path, $0.verdict.name) })
    }

    @Test("a fresh install is all ok; each tampering kind gets its verdict")
    func tamperingKinds() throws {
        let directory = try TemporaryDirectory()
        let app = try Self.installed(directory)
        let clean = try Reverifier.verifyTree(at: app, policy: Self.policy)
        #expect(clean.isOK)
        #expect(clean.files.count == 6)
        #expect(clean.files.allSatisfy { $0.verdict == .ok && $0.signatureSource == .xattr })

        // Content changed.
        try Data("changed".utf8).write(to: URL(fileURLWithPath: app + "/readme.txt"))
        // File deleted; file added.
        unlink(app + "/blob.bin")
        try directory.write("app/img/extra.png", Data("new".utf8))
        // Attribute stripped (as cp or tar without --xattrs would).
        #expect(try run("setfattr", ["-x", "user.signet.sig", app + "/run.sh"]).status == 0)
        // Attribute replaced by another file's valid signature.
        let other = try run("getfattr", ["--only-values", "-n", "user.signet.sig", app + "/img/photo.jpg"]).stdout
        try setAttribute(app + "/img/icons/ok.svg", Array(other))
        // Attribute truncated, and another extended.
        let photoSig = Array(other)
        try setAttribute(app + "/img/photo.jpg", Array(photoSig.dropLast()))
        let unicodeSig = Array(try run("getfattr", ["--only-values", "-n", "user.signet.sig", app + "/ünï.txt"]).stdout)
        try setAttribute(app + "/ünï.txt", unicodeSig + [0, 0])

        let report = try Reverifier.verifyTree(at: app, policy: Self.policy)
        #expect(!report.isOK)
        #expect(
            Self.verdicts(report) == [
                "readme.txt": "modified", "blob.bin": "missing", "img/extra.png": "added", "run.sh": "attributes-lost",
                "img/icons/ok.svg": "attributes-lost", "img/photo.jpg": "attributes-lost", "ünï.txt": "attributes-lost"
            ])
        #expect(report.files.first { $0.path == "img/icons/ok.svg" }?.detail.contains("replaced by another signature, truncated or extended") == true)

        // --repair restores the four lost attributes (content checked first) and nothing else.
        var options = ReverifyOptions()
        options.repair = true
        let repaired = try Reverifier.verifyTree(at: app, policy: Self.policy, options: options)
        #expect(repaired.counts[.repaired] == 4)
        #expect(repaired.counts[.modified] == 1 && repaired.counts[.missing] == 1 && repaired.counts[.added] == 1)
        let after = try Reverifier.verifyTree(at: app, policy: Self.policy)
        #expect(after.files.filter { $0.verdict == .attributesLost }.isEmpty)
        #expect(
            try run(
                "openssl",
                [
                    "dgst", "-sha256", "-verify", Fixtures.key("rsa2048-spki.pem"), "-signature",
                    try directory.write("run.sig", try run("getfattr", ["--only-values", "-n", "user.signet.sig", app + "/run.sh"]).stdout),
                    app + "/run.sh"
                ]
            ).status == 0, "the restored attribute is the file's real signature")
    }

    @Test("a tree check compares each user.signet.sig with the recorded one; RSA only where they differ, and every tampering still has its verdict")
    func recordedSignatures() throws {
        let directory = try TemporaryDirectory()
        let app = try Self.installed(directory)
        let record = RecordedSignatures(app)
        let saved = try contents(record.path)
        #expect(saved.count == "signet-signatures/2 256\n".utf8.count + 6 * 256, "one signature per installed file")
        let fast = "user.signet.sig is the signature unpack installed"
        let clean = try Reverifier.verifyTree(at: app, policy: Self.policy)
        #expect(clean.isOK && clean.files.allSatisfy { $0.detail.contains(fast) }, "no RSA verification on a clean tree: \(clean.files.map(\.detail))")

        // A record changed in one place no longer matches its publisher signature
        // (.signet/signatures.sig): it is not believed at all, and every signature is verified.
        try record.replace("readme.txt")
        let slow = try Reverifier.verifyTree(at: app, policy: Self.policy)
        #expect(slow.isOK && slow.files.allSatisfy { $0.detail == "verified" }, "an altered record: every signature is verified: \(slow.files.map(\.detail))")
        try saved.write(to: URL(fileURLWithPath: record.path))

        // Another key's valid signature of the same content, and random bytes of the right length.
        let otherSignature = try run("openssl", ["dgst", "-sha256", "-sign", Fixtures.key("other3072-pkcs8.pem"), app + "/run.sh"]).stdout
        #expect(otherSignature.count == 384)
        try setAttribute(app + "/run.sh", Array(otherSignature))
        try setAttribute(app + "/readme.txt", (0..<256).map { _ in UInt8.random(in: 0...255) })
        // No attribute and no valid copy in the record: unsigned. Content changed: modified. Gone, added.
        #expect(try run("setfattr", ["-x", "user.signet.sig", app + "/img/photo.jpg"]).status == 0)
        try record.replace("img/photo.jpg")
        try Data("changed".utf8).write(to: URL(fileURLWithPath: app + "/ünï.txt"))
        unlink(app + "/blob.bin")
        try directory.write("app/new.txt", Data("new".utf8))
        let expected = [
            "run.sh": "attributes-lost", "readme.txt": "attributes-lost", "img/photo.jpg": "unsigned",
            "ünï.txt": "modified", "blob.bin": "missing", "new.txt": "added", "img/icons/ok.svg": "ok"
        ]
        let tampered = try Reverifier.verifyTree(at: app, policy: Self.policy)
        #expect(Self.verdicts(tampered) == expected)
        #expect(tampered.files.first { $0.path == "run.sh" }?.detail.contains("does not verify") == true)
        // Without the record (a tree installed before it existed) every signature is verified:
        // the same verdicts, except that nothing is left to restore the lost attributes from.
        unlink(record.path)
        var withoutRecord = expected
        withoutRecord["run.sh"] = "unsigned"
        withoutRecord["readme.txt"] = "unsigned"
        #expect(Self.verdicts(try Reverifier.verifyTree(at: app, policy: Self.policy)) == withoutRecord)
    }

    @Test("a record authenticated by the key but not fitting the manifest (one signature more) is not used: every signature is verified")
    func recordOfAnotherLength() throws {
        let directory = try TemporaryDirectory()
        let app = try Self.installed(directory)
        let record = RecordedSignatures(app)
        let (length, _) = try record.layout()
        var longer = try contents(record.path)
        longer.append(Data(repeating: 7, count: length))
        try longer.write(to: URL(fileURLWithPath: record.path))
        // Signed as the publisher would sign it, so only the count can refuse it.
        let signature = try run("openssl", ["dgst", "-sha256", "-sign", Fixtures.key("rsa2048-pkcs8.pem"), record.path]).stdout
        try Data(signature).write(to: URL(fileURLWithPath: app + "/.signet/signatures.sig"))
        let report = try Reverifier.verifyTree(at: app, policy: Self.policy)
        #expect(report.isOK && report.files.allSatisfy { $0.detail == "verified" }, "\(report.files.map(\.detail))")
        // Back to its own length, the same signed record is used again.
        try longer.prefix(longer.count - length).write(to: URL(fileURLWithPath: record.path))
        let resigned = try run("openssl", ["dgst", "-sha256", "-sign", Fixtures.key("rsa2048-pkcs8.pem"), record.path]).stdout
        try Data(resigned).write(to: URL(fileURLWithPath: app + "/.signet/signatures.sig"))
        let fast = try Reverifier.verifyTree(at: app, policy: Self.policy)
        #expect(fast.isOK && fast.files.allSatisfy { $0.detail.contains("the signature unpack installed") }, "\(fast.files.map(\.detail))")
    }

    /// Sets user.signet.sig with the real setfattr (base64 value, "0s" prefix).
    func setAttribute(_ path: String, _ value: [UInt8]) throws {
        #expect(try run("setfattr", ["-n", "user.signet.sig", "-v", "0s" + Data(value).base64EncodedString(), path]).status == 0)
    }

    @Test("a listed file replaced by a FIFO (also where the signed file was empty) or a directory is modified, not a lost attribute")
    func notRegularFiles() throws {
        let directory = try TemporaryDirectory()
        try FileManager.default.createDirectory(atPath: directory.file("tree"), withIntermediateDirectories: true)
        for (name, content) in [("empty.txt", ""), ("data.txt", "data\n"), ("folder.txt", "folder\n"), ("same.txt", "same\n")] {
            _ = try directory.write("tree/\(name)", Data(content.utf8))
        }
        let package = directory.file("p.zip")
        _ = try PackageBuilder.pack(
            [directory.file("tree")], to: package, signer: Signer(key: Fixtures.signingKey()), options: PackOptions(name: "fifo", version: "1"))
        let app = directory.file("app")
        _ = try Installer.install(package, to: app, policy: Self.policy, options: InstallOptions())
        #expect(try Reverifier.verifyTree(at: app, policy: Self.policy).isOK)
        for name in ["empty.txt", "data.txt"] {
            unlink(app + "/" + name)
            #expect(mkfifo(app + "/" + name, 0o644) == 0)
        }
        unlink(app + "/folder.txt")
        #expect(mkdir(app + "/folder.txt", 0o755) == 0)
        let report = try Reverifier.verifyTree(at: app, policy: Self.policy)
        let verdicts = Self.verdicts(report)
        #expect(verdicts["empty.txt"] == "modified")
        #expect(verdicts["data.txt"] == "modified")
        #expect(verdicts["folder.txt"] == "modified")
        #expect(verdicts["same.txt"] == "ok")
        for file in report.files where file.path != "same.txt" {
            #expect(file.detail.contains("no longer a regular file"), "\(file.path): \(file.detail)")
        }
    }

    @Test("repair does not bless modified content, and needs a valid sidecar")
    func repairChecksContent() throws {
        let directory = try TemporaryDirectory()
        let app = try Self.installed(directory)
        #expect(try run("setfattr", ["-x", "user.signet.sig", app + "/readme.txt"]).status == 0)
        try Data("tampered".utf8).write(to: URL(fileURLWithPath: app + "/readme.txt"))
        #expect(try run("setfattr", ["-x", "user.signet.sig", app + "/run.sh"]).status == 0)
        try RecordedSignatures(app).replace("run.sh")
        var options = ReverifyOptions()
        options.repair = true
        let report = try Reverifier.verifyTree(at: app, policy: Self.policy, options: options)
        #expect(Self.verdicts(report)["readme.txt"] == "modified")
        #expect(Self.verdicts(report)["run.sh"] == "unsigned")
        #expect(try run("getfattr", ["-n", "user.signet.sig", app + "/readme.txt"]).status != 0, "no attribute was written for modified content")
    }

    @Test("symbolic link swaps are never followed")
    func symlinkSwaps() throws {
        let directory = try TemporaryDirectory()
        let app = try Self.installed(directory)
        // A file replaced by a link to an identical copy elsewhere (same bytes, same attributes).
        let copy = directory.file("copy.txt")
        #expect(try run("cp", ["-a", "--preserve=xattr", app + "/readme.txt", copy]).status == 0)
        unlink(app + "/readme.txt")
        symlink(copy, app + "/readme.txt")
        // A directory on the path replaced by a link.
        #expect(try run("mv", [app + "/img", directory.file("img-elsewhere")]).status == 0)
        symlink(directory.file("img-elsewhere"), app + "/img")
        let report = try Reverifier.verifyTree(at: app, policy: Self.policy)
        #expect(Self.verdicts(report)["readme.txt"] == "modified")
        #expect(Self.verdicts(report)["img/photo.jpg"] == "modified")
        #expect(report.files.first { $0.path == "img/photo.jpg" }?.detail.contains("symbolic link") == true)
        // A single file given as a link: a verdict, not a crash, and not followed.
        let single = Reverifier.verifyFile(at: app + "/readme.txt", policy: try Self.policy)
        #expect(single.verdict == .unreadable)
        #expect(single.detail.contains("symbolic link"))
    }

    @Test("opening below the tree: openat2 and the per-component fallback refuse the same links", arguments: [true, false])
    func openBeneath(_ useOpenat2: Bool) throws {
        let directory = try TemporaryDirectory()
        let root = directory.file("root")
        try FileManager.default.createDirectory(atPath: root + "/real/deeper", withIntermediateDirectories: true)
        try Data("x".utf8).write(to: URL(fileURLWithPath: root + "/real/deeper/file"))
        try Data("outside".utf8).write(to: URL(fileURLWithPath: directory.file("outside")))
        symlink(root + "/real", root + "/linked-dir")
        symlink(directory.file("outside"), root + "/linked-file")
        symlink("../outside", root + "/relative-escape")
        let tree = try Paths.open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        let rootFD = tree.descriptor
        func outcome(_ path: String) -> String {
            do {
                _ = try Paths.open(path, beneath: rootFD, useOpenat2: useOpenat2)
                return "opened"
            } catch {
                return String(cString: strerror(error.code))
            }
        }
        #expect(outcome("real/deeper/file") == "opened")
        #expect(outcome("real/missing") == String(cString: strerror(ENOENT)))
        // A link as the last component or anywhere on the path is refused, never followed.
        for link in ["linked-file", "relative-escape", "linked-dir/deeper/file"] {
            #expect(outcome(link) == String(cString: strerror(ELOOP)) || outcome(link) == String(cString: strerror(ENOTDIR)), "\(link): \(outcome(link))")
        }
    }

    @Test("single files: ok, modified, unsigned, untrusted, unreadable")
    func singleFiles() throws {
        let directory = try TemporaryDirectory()
        let app = try Self.installed(directory)
        #expect(Reverifier.verifyFile(at: app + "/run.sh", policy: try Self.policy).verdict == .ok)
        try Data("x".utf8).write(to: URL(fileURLWithPath: app + "/run.sh"))
        #expect(Reverifier.verifyFile(at: app + "/run.sh", policy: try Self.policy).verdict == .modified)
        #expect(Reverifier.verifyFile(at: try directory.write("plain.txt", Data("x".utf8)), policy: try Self.policy).verdict == .unsigned)
        let untrusted = Reverifier.verifyFile(at: app + "/readme.txt", policy: try Fixtures.trust("other3072-spki.der"))
        #expect(untrusted.verdict == .untrusted)
        #expect(untrusted.detail.contains(String(Fixtures.rsa2048KeyID.prefix(16))))
        #expect(Reverifier.verifyFile(at: directory.file("absent"), policy: try Self.policy).verdict == .unreadable)
        // Attribute stripped: the tree's record still verifies a single file.
        #expect(try run("setfattr", ["-x", "user.signet.sig", app + "/readme.txt"]).status == 0)
        let sidecar = Reverifier.verifyFile(at: app + "/readme.txt", policy: try Self.policy)
        #expect(sidecar.verdict == .ok && sidecar.signatureSource == .sidecar)
    }

    @Test("--exclude and --only choose what is checked")
    func selection() throws {
        let directory = try TemporaryDirectory()
        let app = try Self.installed(directory)
        try Data("log".utf8).write(to: URL(fileURLWithPath: app + "/debug.log"))
        try Data("changed".utf8).write(to: URL(fileURLWithPath: app + "/img/icons/ok.svg"))
        var options = ReverifyOptions()
        options.exclude = ["*.log", "icons"]
        let excluded = try Reverifier.verifyTree(at: app, policy: Self.policy, options: options)
        #expect(excluded.isOK, "\(Self.verdicts(excluded))")
        #expect(!excluded.files.contains { $0.path.hasPrefix("img/icons/") || $0.path == "debug.log" })
        options = ReverifyOptions()
        options.only = ["img"]
        let only = try Reverifier.verifyTree(at: app, policy: Self.policy, options: options)
        #expect(Set(only.files.map(\.path)) == ["img/photo.jpg", "img/icons/ok.svg"])
        #expect(Self.verdicts(only)["img/icons/ok.svg"] == "modified")
    }

    @Test("a tree whose manifest was altered, or signed by an untrusted key, fails as a whole")
    func manifestChecks() throws {
        let directory = try TemporaryDirectory()
        let app = try Self.installed(directory)
        let untrusted = try Reverifier.verifyTree(at: app, policy: Fixtures.trust("other3072-spki.der"))
        #expect(untrusted.manifestFailure == .untrustedSigner)
        let manifest = app + "/.signet/manifest.json"
        var bytes = Array(try contents(manifest))
        bytes.insert(UInt8(ascii: " "), at: 1)
        try Data(bytes).write(to: URL(fileURLWithPath: manifest))
        let altered = try Reverifier.verifyTree(at: app, policy: Self.policy)
        #expect(altered.manifestFailure == .badManifestSignature)
        #expect(!altered.isOK)
        #expect(signetError { _ = try Reverifier.verifyTree(at: directory.path, policy: Self.policy) }?.code == .usage)
    }

    @Test("IMA: evmctl ima_verify accepts installed files and rejects a changed one; reverify reads user.ima")
    func ima() throws {
        let directory = try TemporaryDirectory()
        let app = try Self.installed(directory, ima: IMASignature.userAttribute)
        let evmctl = try which("evmctl")
        let accepted = try run(evmctl, ["ima_verify", "--xattr-user", "--key", Fixtures.key("rsa2048-cert.der"), app + "/readme.txt"])
        #expect(accepted.status == 0, "\(accepted.stdoutText) \(accepted.stderr)")
        var bytes = Array(try contents(app + "/readme.txt"))
        bytes[0] ^= 1
        try Data(bytes).write(to: URL(fileURLWithPath: app + "/readme.txt"))
        #expect(try run(evmctl, ["ima_verify", "--xattr-user", "--key", Fixtures.key("rsa2048-cert.der"), app + "/readme.txt"]).status != 0)
        // With user.signet.sig gone, reverify falls back to the IMA attribute.
        #expect(try run("setfattr", ["-x", "user.signet.sig", app + "/run.sh"]).status == 0)
        let report = Reverifier.verifyFile(at: app + "/run.sh", policy: try Self.policy)
        #expect(report.verdict == .ok && report.signatureSource == .ima)
        #expect(try Reverifier.verifyTree(at: app, policy: Self.policy).files.first { $0.path == "run.sh" }?.signatureSource == .ima)
    }

    @Test("security.ima needs root: a clear error otherwise")
    func securityIMA() throws {
        guard getuid() != 0 else {
            // As root it is written (and evmctl reads it without --xattr-user).
            let directory = try TemporaryDirectory()
            let app = try Self.installed(directory, ima: IMASignature.securityAttribute)
            let evmctl = try which("evmctl")
            #expect(try run(evmctl, ["ima_verify", "--key", Fixtures.key("rsa2048-cert.der"), app + "/readme.txt"]).status == 0)
            return
        }
        let directory = try TemporaryDirectory()
        let error = signetError { _ = try Self.installed(directory, ima: IMASignature.securityAttribute) }
        #expect(error?.reason.contains("need root") == true)
    }

    @Test("ENOTSUP: on a filesystem without user xattrs (ramfs), signatures live in .signet/sigs/ (and the record) and reverify uses them, naming which")
    func sidecarOnRamfs() throws {
        let directory = try TemporaryDirectory()
        guard let mount = try ScratchMount.mount("ramfs", options: "size=16m", at: directory.file("ramfs"), untested: "the ENOTSUP path") else { return }
        defer { mount.unmount() }
        let mountPoint = mount.path
        #expect(try run("bash", ["-c", "touch \"$0/probe\" && setfattr -n user.x -v 1 \"$0/probe\"", mountPoint]).status != 0, "ramfs has no user xattrs")
        let root = try PackageFixture.tree(in: directory)
        let package = directory.file("p.zip")
        _ = try PackageBuilder.pack([root], to: package, signer: Signer(key: Fixtures.signingKey()), options: PackOptions(name: "a", version: "1"))
        let report = try Installer.install(package, to: mountPoint + "/app", policy: Self.policy)
        #expect(!report.attributesWritten)
        let tree = try Reverifier.verifyTree(at: mountPoint + "/app", policy: Self.policy)
        #expect(tree.isOK, "\(Self.verdicts(tree))")
        #expect(!tree.attributesSupported)
        // The report names the copy that vouched: the tree's record (read first, one file for
        // all), else each file's sidecar.
        #expect(tree.files.allSatisfy { $0.signatureSource == .record })
        let record = try contents(mountPoint + "/app/.signet/signatures")
        unlink(mountPoint + "/app/.signet/signatures")
        let fromSidecars = try Reverifier.verifyTree(at: mountPoint + "/app", policy: Self.policy)
        #expect(fromSidecars.isOK && fromSidecars.files.allSatisfy { $0.signatureSource == .sidecar })
        try record.write(to: URL(fileURLWithPath: mountPoint + "/app/.signet/signatures"))
        try Data("changed".utf8).write(to: URL(fileURLWithPath: mountPoint + "/app/readme.txt"))
        #expect(Self.verdicts(try Reverifier.verifyTree(at: mountPoint + "/app", policy: Self.policy))["readme.txt"] == "modified")
        #expect(Reverifier.verifyFile(at: mountPoint + "/app/run.sh", policy: try Self.policy).signatureSource == .sidecar)
    }

    @Test("status reads where a file came from")
    func status() throws {
        let directory = try TemporaryDirectory()
        let app = try Self.installed(directory)
        let origin = try FileOrigin(path: app + "/img/photo.jpg")
        #expect(origin.isInstalled)
        #expect(origin.packageName == "assets" && origin.version == "3.1" && origin.sequence == 31)
        #expect(origin.packagePath == "img/photo.jpg")
        #expect(origin.keyID?.hex == Fixtures.rsa2048KeyID)
        #expect(try !FileOrigin(path: try directory.write("plain", Data())).isInstalled)
    }

    @Test("async API: off the calling thread, with a report; cancellation stops it")
    func asyncAPI() async throws {
        let directory = try TemporaryDirectory()
        let app = try Self.installed(directory)
        let report = try await Reverifier.verifyTreeAsync(at: app, policy: Self.policy)
        #expect(report.isOK && report.files.count == 6 && report.duration >= 0)
        #expect(await Reverifier.verifyFileAsync(at: app + "/run.sh", policy: try Self.policy).verdict == .ok)
        // Cancelled before it starts: the cancellation handler runs first, so no file is checked.
        let policy = try Self.policy
        let cancelled = Task { () async throws -> TreeReport in
            withUnsafeCurrentTask { $0?.cancel() }
            return try await Reverifier.verifyTreeAsync(at: app, policy: policy)
        }
        await #expect(throws: CancellationError.self) { _ = try await cancelled.value }
        // And the flag the async wrapper sets stops the synchronous walk.
        let flag = CancellationFlag()
        flag.set()
        #expect(throws: CancellationError.self) { _ = try Reverifier.verifyTree(at: app, policy: policy, options: ReverifyOptions(), cancelled: flag) }
    }
}
