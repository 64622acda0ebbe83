import Foundation
import Testing
@testable import SignetCore
@testable import SignetCrypto
@testable import SignetManifest
@testable import SignetArchive
@testable import SignetNetwork
@testable import SignetPackage
import SignetTestSupport
import SignetCryptoTestSupport
import SignetPackageTestSupport

@Suite("pack: the package format, checked with unzip, openssl and Python")
struct PackTests {
    @Test("layout, order, modes and compression of a package")
    func layout() throws {
        let directory = try TemporaryDirectory()
        let root = try PackageFixture.tree(in: directory)
        let result = try PackageFixture.pack([root], to: directory.file("p.zip"))
        let names = result.manifest.files.map(\.path)
        #expect(names == ["blob.bin", "img/icons/ok.svg", "img/photo.jpg", "readme.txt", "run.sh", "ünï.txt"])
        #expect(result.manifest.files.first { $0.path == "run.sh" }?.mode == .executable)
        #expect(result.compression["blob.bin"] == .stored)
        #expect(result.compression["img/photo.jpg"] == .stored)
        #expect(result.compression["readme.txt"] == .deflated)

        let listing = try run(
            "python3",
            [
                "-c",
                """
                import zipfile, sys
                z = zipfile.ZipFile(sys.argv[1])
                for i in z.infolist():
                    print(i.filename, i.compress_type, oct(i.external_attr >> 16), i.date_time[0], i.flag_bits & 1)
                """, directory.file("p.zip")
            ]
        ).stdoutText.split(separator: "\n").map(String.init)
        let entryNames = listing.map { String($0.split(separator: " ")[0]) }
        #expect(
            entryNames == names + [".signet/manifest.json", ".signet/manifest.json.sig"] + names.map { ".signet/sigs/\($0).sig" } + [".signet/signatures.sig"])
        #expect(listing.allSatisfy { $0.hasSuffix(" 1980 0") }, "fixed timestamps, no encryption: \(listing)")
        // run.sh is a few bytes, which deflate would enlarge: stored, with its executable mode.
        #expect(listing.contains { $0.hasPrefix("run.sh 0 0o100755") }, "\(listing)")
        #expect(listing.contains { $0.hasPrefix("readme.txt 8 0o100644") })
        #expect(listing.contains { $0.hasPrefix("blob.bin 0 0o100644") })
        #expect(!listing.contains { $0.contains("empty-dir") }, "no directory entries")
    }

    @Test("unzip extracts it and openssl verifies every signature and the manifest's")
    func interop() throws {
        let directory = try TemporaryDirectory()
        let root = try PackageFixture.tree(in: directory)
        let result = try PackageFixture.pack([root], to: directory.file("p.zip"))
        let out = directory.file("x")
        let unzip = try run("unzip", ["-q", directory.file("p.zip"), "-d", out])
        #expect(unzip.status == 0, "\(unzip.stderr)")
        #expect(try run("unzip", ["-tq", directory.file("p.zip")]).status == 0)
        for file in result.manifest.files {
            let verified = try run(
                "openssl",
                [
                    "dgst", "-sha256", "-verify", Fixtures.key("rsa2048-spki.pem"),
                    "-signature", out + "/.signet/sigs/" + file.path + ".sig", out + "/" + file.path
                ])
            #expect(verified.status == 0, "\(file.path): \(verified.stdoutText)")
            #expect(try contents(out + "/" + file.path) == contents(root + "/" + file.path))
        }
        let manifest = try run(
            "openssl",
            [
                "dgst", "-sha256", "-verify", Fixtures.key("rsa2048-spki.pem"),
                "-signature", out + "/.signet/manifest.json.sig", out + "/.signet/manifest.json"
            ])
        #expect(manifest.status == 0)
        #expect(try Manifest.parse(Array(contents(out + "/.signet/manifest.json"))) == result.manifest)
        // Python's zipfile checks every CRC and finds the manifest's hashes right.
        let python = try run(
            "python3",
            [
                "-c",
                """
                import zipfile, hashlib, json, sys
                z = zipfile.ZipFile(sys.argv[1])
                assert z.testzip() is None
                m = json.loads(z.read(".signet/manifest.json"))
                for f in m["files"]:
                    data = z.read(f["path"])
                    assert len(data) == f["size"] and hashlib.sha256(data).hexdigest() == f["sha256"], f["path"]
                print(len(m["files"]))
                """, directory.file("p.zip")
            ])
        #expect(python.stdoutText == "6\n", "\(python.stderr)")
    }

    @Test("the same inputs and SOURCE_DATE_EPOCH give a byte-identical package")
    func reproducible() throws {
        let directory = try TemporaryDirectory()
        let root = try PackageFixture.tree(in: directory)
        _ = try PackageFixture.pack([root], to: directory.file("a.zip"))
        _ = try PackageFixture.pack([root], to: directory.file("b.zip"))
        #expect(try contents(directory.file("a.zip")) == contents(directory.file("b.zip")))
        // Other names, sequences or contents change it.
        _ = try PackageFixture.pack(
            [root], to: directory.file("c.zip"), PackOptions(name: "assets", version: "1.0", sequence: 8, created: Timestamp(secondsSinceEpoch: 1_700_000_000)))
        #expect(try contents(directory.file("a.zip")) != contents(directory.file("c.zip")))
    }

    @Test("deflating on several threads gives the same bytes as on one, and leaves no temporary files")
    func parallelDeflate() throws {
        let directory = try TemporaryDirectory()
        let root = try PackageFixture.tree(in: directory)
        for index in 0..<5 {
            try Data(String(repeating: "text file \(index) with some repetition\n", count: 20_000 * (index + 1)).utf8)
                .write(to: URL(fileURLWithPath: root + "/text\(index).log"))
        }
        let options = PackOptions(name: "n", version: "v", sequence: 1, created: Timestamp(secondsSinceEpoch: 1_700_000_000))
        let key = try Fixtures.signingKey()
        _ = try PackageBuilder.pack([root], to: directory.file("one.zip"), signer: Signer(key: key), options: options, workers: 1)
        let parallel = try PackageBuilder.pack([root], to: directory.file("three.zip"), signer: Signer(key: key), options: options, workers: 3)
        #expect(parallel.compression.values.filter { $0 == .deflated }.count >= 6)
        #expect(try contents(directory.file("one.zip")) == contents(directory.file("three.zip")))
        #expect(try PackageReader.verify(directory.file("three.zip"), policy: Fixtures.trust("rsa2048-spki.der")).isValid)
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path)
        #expect(names.filter { $0.hasPrefix(".") }.isEmpty, "temporary archives removed: \(names)")
    }

    @Test("other algorithms: the manifest names it and openssl verifies with it", arguments: [SignatureAlgorithm.rsaPKCS1v15SHA512, .rsaPSSSHA256])
    func algorithms(_ algorithm: SignatureAlgorithm) throws {
        let directory = try TemporaryDirectory()
        let root = try PackageFixture.tree(in: directory)
        let result = try PackageBuilder.pack(
            [root], to: directory.file("p.zip"), signer: Signer(key: Fixtures.signingKey(), algorithm: algorithm),
            options: PackOptions(name: "n", version: "v"))
        #expect(result.manifest.algorithm == algorithm)
        #expect(try run("unzip", ["-q", directory.file("p.zip"), "-d", directory.file("x")]).status == 0)
        let verified = try run(
            "openssl",
            ["dgst"] + opensslDigestArguments(algorithm.id) + [
                "-verify", Fixtures.key("rsa2048-spki.pem"),
                "-signature", directory.file("x/.signet/sigs/readme.txt.sig"), directory.file("x/readme.txt")
            ])
        #expect(verified.status == 0)
        // The manifest still records SHA-256 of each file, whatever the signature hash.
        let readme = result.manifest.files.first { $0.path == "readme.txt" }!
        #expect(readme.sha256 == (try Digest.compute(fileAt: root + "/readme.txt", algorithm: .sha256).hex))
    }

    @Test("files and directories: names relative to each PATH, duplicates refused")
    func inputs() throws {
        let directory = try TemporaryDirectory()
        let root = try PackageFixture.tree(in: directory)
        let single = try directory.write("notes.md", Data("# notes".utf8))
        let inputs = try PackageBuilder.collect([root, single], followSymlinks: false)
        #expect(inputs.map(\.packagePath).contains("notes.md"))
        #expect(inputs.map(\.packagePath).contains("img/icons/ok.svg"))
        try directory.write("readme.txt", Data("other".utf8))
        let clash = signetError { _ = try PackageBuilder.collect([root, directory.file("readme.txt")], followSymlinks: false) }
        #expect(clash?.code == .usage)
        #expect(clash?.reason.contains("would both be 'readme.txt'") == true)
        // NFC and NFD spellings of one name.
        let nfc = directory.file("n")
        try FileManager.default.createDirectory(atPath: nfc, withIntermediateDirectories: true)
        try Data("1".utf8).write(to: URL(fileURLWithPath: nfc + "/caf\u{e9}"))
        try Data("2".utf8).write(to: URL(fileURLWithPath: nfc + "/cafe\u{301}"))
        let twins = signetError { _ = try PackageBuilder.collect([nfc], followSymlinks: false) }
        #expect(twins?.reason.contains("Unicode normalisation") == true, "\(twins?.reason ?? "accepted")")
    }

    @Test("symbolic links, FIFOs and bad names are refused; nothing is written")
    func refusals() throws {
        let directory = try TemporaryDirectory()
        let root = try PackageFixture.tree(in: directory)
        symlink(root + "/readme.txt", root + "/link.txt")
        let out = directory.file("p.zip")
        let link = signetError { _ = try PackageFixture.pack([root], to: out) }
        #expect(link?.reason.contains("symbolic link") == true)
        #expect(link?.reason.contains("--follow-symlinks") == true)
        #expect(!FileManager.default.fileExists(atPath: out))
        // Followed, the link's target is packed under the link's name.
        let followed = try PackageFixture.pack([root], to: out, PackOptions(name: "n", version: "v", followSymlinks: true))
        #expect(followed.manifest.files.contains { $0.path == "link.txt" })
        unlink(out)
        unlink(root + "/link.txt")

        mkfifo(root + "/pipe", 0o644)
        let fifo = signetError { _ = try PackageFixture.pack([root], to: out) }
        #expect(fifo?.reason.contains("a FIFO") == true)
        unlink(root + "/pipe")

        try Data("x".utf8).write(to: URL(fileURLWithPath: root + "/back\\slash"))
        let name = signetError { _ = try PackageFixture.pack([root], to: out) }
        #expect(name?.reason.contains("backslash") == true)
        unlink(root + "/back\\slash")

        let missing = signetError { _ = try PackageFixture.pack([root, directory.file("absent")], to: out) }
        #expect(missing?.code == .fileNotFound)
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.contains("p.zip") }
        #expect(leftovers.isEmpty, "no package and no temporary file: \(leftovers)")
    }

    @Test("expiry must follow creation; name and version are checked")
    func options() throws {
        let directory = try TemporaryDirectory()
        let root = try PackageFixture.tree(in: directory)
        let created = Timestamp(secondsSinceEpoch: 1_700_000_000)
        let early = signetError {
            _ = try PackageFixture.pack([root], to: directory.file("p.zip"), PackOptions(name: "n", version: "v", expires: created, created: created))
        }
        #expect(early?.code == .usage)
        #expect(signetError { _ = try PackageFixture.pack([root], to: directory.file("p.zip"), PackOptions(name: "", version: "v")) }?.code == .usage)
        #expect(signetError { _ = try PackageFixture.pack([root], to: directory.file("p.zip"), PackOptions(name: "a\nb", version: "v")) }?.code == .usage)
        let later = try PackageFixture.pack(
            [root], to: directory.file("p.zip"), PackOptions(name: "n", version: "v", expires: Timestamp(secondsSinceEpoch: 1_800_000_000), created: created))
        #expect(later.manifest.expires?.rfc3339 == "2027-01-15T08:00:00Z")
    }

    @Test("a PKCS#12 key's certificate is stored as .signet/certs/signer.der")
    func certificate() throws {
        let directory = try TemporaryDirectory()
        let root = try PackageFixture.tree(in: directory)
        let key = try PrivateKey(contentsOf: Fixtures.key("rsa2048.p12"), passphrase: Fixtures.passphrase)
        _ = try PackageBuilder.pack([root], to: directory.file("p.zip"), signer: Signer(key: key), options: PackOptions(name: "n", version: "v"))
        let stored = try run("unzip", ["-p", directory.file("p.zip"), ".signet/certs/signer.der"]).stdout
        #expect(stored == (try contents(Fixtures.key("rsa2048-cert.der"))))
    }
}
