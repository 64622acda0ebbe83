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

@Suite("unpack: verify before writing, install atomically")
struct InstallTests {
    static let options = PackOptions(name: "assets", version: "1.0", sequence: 10)

    /// Names in `directory` other than the given ones (staging or old trees left behind).
    /// Signet's files in `directory`, except the documented per-destination lock (`.DIR.signet-lock`).
    static func leftovers(_ directory: String, except keep: Set<String>) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: directory).filter { !keep.contains($0) && $0.contains("signet") && !isKeptBesideDestination($0) }
    }

    @Test("files, modes, .signet/, and attributes that getfattr reads and openssl verifies")
    func roundTrip() throws {
        let directory = try TemporaryDirectory()
        let (root, package) = try PackageFixture.package(directory)
        let dest = directory.file("install/app")
        let report = try Installer.install(package, to: dest, policy: PackageFixture.policy)
        #expect(report.files.count == 6)
        #expect(report.attributesWritten)
        #expect(!report.exchanged, "a new directory is renamed into place")
        #expect(!FileManager.default.fileExists(atPath: dest + "/.signet/sigs"), "no sidecar file per resource where attributes work")
        #expect(try RecordedSignatures(dest).layout().length == 256)
        for file in report.files {
            #expect(try contents(dest + "/" + file) == contents(root + "/" + file), "\(file)")
            let sig = try run("getfattr", ["--only-values", "-n", "user.signet.sig", dest + "/" + file])
            #expect(sig.status == 0, "\(sig.stderr)")
            #expect(sig.stdout == (try RecordedSignatures(dest).signature(of: file)), "the tree's record holds the same signature")
            let sigFile = try directory.write("xattr.sig", sig.stdout)
            let verified = try run("openssl", ["dgst", "-sha256", "-verify", Fixtures.key("rsa2048-spki.pem"), "-signature", sigFile, dest + "/" + file])
            #expect(verified.status == 0, "the attribute is the file's signature: \(file)")
            let meta = try run("getfattr", ["--only-values", "-n", "user.signet.meta", dest + "/" + file]).stdout
            let json = try #require(try JSONSerialization.jsonObject(with: meta) as? [String: Any])
            #expect(json["path"] as? String == file)
            #expect(json["name"] as? String == "assets")
            #expect(json["sequence"] as? Int == 10)
            #expect(json["key_id"] as? String == Fixtures.rsa2048KeyID)
        }
        let attributes = try FileManager.default.attributesOfItem(atPath: dest + "/run.sh")
        #expect((attributes[.posixPermissions] as? Int) == 0o755)
        #expect((try FileManager.default.attributesOfItem(atPath: dest + "/readme.txt")[.posixPermissions] as? Int) == 0o644)
        #expect(FileManager.default.fileExists(atPath: dest + "/.signet/manifest.json"))
        #expect(FileManager.default.fileExists(atPath: dest + "/.signet/manifest.json.sig"))
        #expect(try Self.leftovers(directory.file("install"), except: ["app"]).isEmpty)
    }

    @Test("an installed tree is exchanged whole; rollback is refused unless allowed")
    func replaceAndRollback() throws {
        let directory = try TemporaryDirectory()
        let (_, v10) = try PackageFixture.package(directory, sequence: 10, name: "v10.zip")
        let (_, v11) = try PackageFixture.package(directory, sequence: 11, name: "v11.zip", extra: "new in 11")
        let dest = directory.file("app")
        _ = try Installer.install(v10, to: dest, policy: PackageFixture.policy)
        let upgraded = try Installer.install(v11, to: dest, policy: PackageFixture.policy)
        #expect(upgraded.exchanged, "renameat2(RENAME_EXCHANGE) swapped the trees")
        #expect(upgraded.replacedSequence == 10)
        #expect(FileManager.default.fileExists(atPath: dest + "/extra.txt"))

        let before = try contents(dest + "/.signet/manifest.json")
        let rollback = signetError { _ = try Installer.install(v10, to: dest, policy: PackageFixture.policy) }
        #expect(rollback?.code == .rollback)
        #expect(rollback?.code.exitStatus.rawValue == 1)
        #expect(rollback?.reason.contains("--allow-downgrade") == true)
        #expect(try contents(dest + "/.signet/manifest.json") == before, "DIR unchanged")

        var options = InstallOptions()
        options.allowDowngrade = true
        _ = try Installer.install(v10, to: dest, policy: PackageFixture.policy, options: options)
        #expect(!FileManager.default.fileExists(atPath: dest + "/extra.txt"), "the whole tree was replaced: no stale files")
        #expect(try Self.leftovers(directory.path, except: []).isEmpty)
    }

    @Test("destinations: empty is fine; foreign needs --force; links and files are refused")
    func destinations() throws {
        let directory = try TemporaryDirectory()
        let (_, package) = try PackageFixture.package(directory)
        let empty = directory.file("empty")
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: false)
        #expect(try Installer.install(package, to: empty, policy: PackageFixture.policy).exchanged)

        let foreign = directory.file("foreign")
        try FileManager.default.createDirectory(atPath: foreign, withIntermediateDirectories: false)
        try Data("precious".utf8).write(to: URL(fileURLWithPath: foreign + "/notes.txt"))
        let refused = signetError { _ = try Installer.install(package, to: foreign, policy: PackageFixture.policy) }
        #expect(refused?.code == .destinationRefused)
        #expect(refused?.code.exitStatus.rawValue == 5)
        #expect(refused?.reason.contains("--force") == true)
        #expect(try contents(foreign + "/notes.txt") == Data("precious".utf8))
        var force = InstallOptions()
        force.force = true
        _ = try Installer.install(package, to: foreign, policy: PackageFixture.policy, options: force)
        #expect(!FileManager.default.fileExists(atPath: foreign + "/notes.txt"))

        symlink(empty, directory.file("link"))
        #expect(signetError { _ = try Installer.install(package, to: directory.file("link"), policy: PackageFixture.policy) }?.code == .destinationRefused)
        #expect(
            signetError { _ = try Installer.install(package, to: directory.file("link") + "/", policy: PackageFixture.policy) }?.code == .destinationRefused,
            "a trailing slash must not make the link look like a directory")
        try directory.write("file", Data())
        #expect(signetError { _ = try Installer.install(package, to: directory.file("file"), policy: PackageFixture.policy) }?.code == .destinationRefused)
    }

    @Test("every hostile archive is refused by unpack with its exit code, and nothing is written", arguments: HostileArchiveTests.cases)
    func hostile(_ test: HostileArchiveTests.Case) throws {
        let directory = try TemporaryDirectory()
        let package = try HostileArchiveTests.build(test.mutation, in: directory)
        let parent = directory.file("install")
        try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: false)
        let error = signetError { _ = try Installer.install(package, to: parent + "/app", policy: PackageFixture.policy) }
        switch test.expected {
        case .error(let code, _):
            #expect(error?.code == code, "\(test.mutation): \(error?.description ?? "installed")")
        case .verdict(let failure, _):
            #expect(error?.code.name == failure.name, "\(test.mutation): \(error?.description ?? "installed")")
            #expect(error?.code.exitStatus == failure.exitStatus)
        }
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: parent).filter { !isKeptBesideDestination($0) }.isEmpty,
            "\(test.mutation): nothing may be written")
    }

    @Test("a failure half-way leaves the installed tree exactly as it was")
    func failureLeavesOldTree() throws {
        let directory = try TemporaryDirectory()
        let (_, good) = try PackageFixture.package(directory, sequence: 10, name: "good.zip")
        let dest = directory.file("app")
        _ = try Installer.install(good, to: dest, policy: PackageFixture.policy)
        let snapshot = try run("bash", ["-c", "cd \"$0\" && find . -type f -print0 | sort -z | xargs -0 sha256sum", dest]).stdoutText
        // A later release whose last resource is corrupt: earlier files are already staged when it fails.
        let (_, next) = try PackageFixture.package(directory, sequence: 11, name: "next.zip")
        let broken = directory.file("broken.zip")
        let generator = Fixtures.hostile + "/hostile.py"
        #expect(try run("python3", [generator, next, Fixtures.key("rsa2048-pkcs8.pem"), "modified-last", broken]).status == 0)
        // --force: without it the corrupt entry is never read, since its file is unchanged and
        // is shared with the installed tree (issue 39); the install then succeeds.
        var options = InstallOptions()
        options.force = true
        let error = signetError { _ = try Installer.install(broken, to: dest, policy: PackageFixture.policy, options: options) }
        #expect(error?.code.name == "modified")
        #expect(try run("bash", ["-c", "cd \"$0\" && find . -type f -print0 | sort -z | xargs -0 sha256sum", dest]).stdoutText == snapshot)
        #expect(try Self.leftovers(directory.path, except: []).isEmpty, "the staging directory was removed")
    }

    @Test("a failed install of a package 2,000 folders deep removes its staging (no PATH_MAX, no descriptor per level)")
    func deepFailureLeavesNothing() throws {
        let directory = try TemporaryDirectory()
        let root = directory.file("deep")
        let relative = Array(repeating: "d", count: 2_000).joined(separator: "/") + "/f.txt"
        #expect(relative.utf8.count <= ResourcePath.maximumResourceLength)
        let made = try run(
            "python3",
            [
                "-c",
                "import os, sys\nos.chdir(sys.argv[1])\nfor part in sys.argv[2].split('/')[:-1]:\n    os.mkdir(part); os.chdir(part)\nopen('f.txt', 'w').write('deep')",
                directory.path, "deep/" + relative
            ])
        #expect(made.status == 0, "\(made.stderr)")
        try Data("last\n".utf8).write(to: URL(fileURLWithPath: root + "/z.txt"))
        let package = directory.file("deep.zip")
        _ = try PackageBuilder.pack([root], to: package, signer: Signer(key: Fixtures.signingKey()), options: Self.options)
        let broken = directory.file("broken.zip")
        let generator = Fixtures.hostile + "/hostile.py"
        #expect(try run("python3", [generator, package, Fixtures.key("rsa2048-pkcs8.pem"), "modified-last", broken]).status == 0)
        let error = signetError { _ = try Installer.install(broken, to: directory.file("app"), policy: PackageFixture.policy) }
        #expect(error?.code.name == "modified", "\(error?.description ?? "installed")")
        #expect(try Self.leftovers(directory.path, except: []).isEmpty, "the deep staging directory was removed")
        // And the whole deep tree installs, and is removed whole when it is replaced.
        _ = try Installer.install(package, to: directory.file("app"), policy: PackageFixture.policy)
        _ = try Installer.install(package, to: directory.file("app"), policy: PackageFixture.policy)
        #expect(try Self.leftovers(directory.path, except: []).isEmpty, "the replaced deep tree was removed")
    }

    @Test("--bare: a package made by openssl dgst and zip installs; unsigned or tampered files do not")
    func bare() throws {
        let directory = try TemporaryDirectory()
        let work = directory.file("bare")
        try FileManager.default.createDirectory(atPath: work + "/img", withIntermediateDirectories: true)
        try directory.write("bare/app.conf", Data("key=value\n".utf8))
        try directory.writeRandom("bare/img/logo.png", count: 2000)
        for file in ["app.conf", "img/logo.png"] {
            #expect(
                try run("openssl", ["dgst", "-sha256", "-sign", Fixtures.key("rsa2048-pkcs8.pem"), "-out", file + ".sig", file], directory: work).status == 0)
        }
        #expect(try run("zip", ["-q", "-r", directory.file("bare.zip"), "."], directory: work).status == 0)
        var options = InstallOptions()
        options.bare = true
        let dest = directory.file("app")
        let report = try Installer.install(directory.file("bare.zip"), to: dest, policy: PackageFixture.policy, options: options)
        #expect(report.manifest == nil)
        #expect(Set(report.files) == ["app.conf", "img/logo.png"])
        #expect(!FileManager.default.fileExists(atPath: dest + "/app.conf.sig"), ".sig files are not installed as resources")
        #expect(try contents(dest + "/.signet/sigs/app.conf.sig") == contents(work + "/app.conf.sig"))
        #expect(try run("getfattr", ["--only-values", "-n", "user.signet.sig", dest + "/img/logo.png"]).stdout == (try contents(work + "/img/logo.png.sig")))

        // Without --bare it is not a Signet package (exit 1: no manifest).
        #expect(
            signetError { _ = try Installer.install(directory.file("bare.zip"), to: directory.file("x"), policy: PackageFixture.policy) }?.code
                == .packageInvalid)
        // A file without its signature.
        try directory.write("bare/unsigned.txt", Data("no sig".utf8))
        #expect(try run("zip", ["-q", "-r", directory.file("unsigned.zip"), "."], directory: work).status == 0)
        #expect(
            signetError { _ = try Installer.install(directory.file("unsigned.zip"), to: directory.file("y"), policy: PackageFixture.policy, options: options) }?
                .code == .missingSignature)
        // A tampered file.
        unlink(work + "/unsigned.txt")
        try directory.write("bare/app.conf", Data("key=evil\n".utf8))
        #expect(try run("zip", ["-q", "-r", directory.file("tampered.zip"), "."], directory: work).status == 0)
        #expect(
            signetError { _ = try Installer.install(directory.file("tampered.zip"), to: directory.file("z"), policy: PackageFixture.policy, options: options) }?
                .code == .badSignature)
        #expect(!FileManager.default.fileExists(atPath: directory.file("y")) && !FileManager.default.fileExists(atPath: directory.file("z")))
    }

    @Test("case-insensitive filesystems are known by their statfs type; this one is not one; collisions are found after NFC and folding")
    func caseFolding() throws {
        for type: Int64 in [0x4d44, 0x2011_BAB0, 0x5346_544E, 0xFF53_4D42] { #expect(CaseFolding.ignoresCase(filesystemType: type)) }
        for type: Int64 in [0xEF53, 0x0102_1994, 0x8584_58F6, 0x9123_683E] { #expect(!CaseFolding.ignoresCase(filesystemType: type)) }
        #expect(!CaseFolding.ignoresCase(at: NSTemporaryDirectory()))
        #expect(throws: SignetError.self) { try CaseFolding.refuseCollisions(["caf\u{e9}", "CAFE\u{301}"], package: "p") }
        #expect(throws: SignetError.self) { try CaseFolding.refuseCollisions(["a/STRASSE", "A/strasse"], package: "p") }
        try CaseFolding.refuseCollisions(["A/x", "a/y", "b", "B2"], package: "p")
    }
}
