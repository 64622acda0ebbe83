#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SignetCore
import SignetCrypto
import SignetNetwork
import SignetPackage
import SignetTestSupport
import SignetCryptoTestSupport

/// The one builder of test packages for the library's tests (the package layer and above):
/// a small tree of every kind of resource, packages of it or of given files signed with the
/// rsa2048 fixture key, the policy that trusts that key, and download options that trust a
/// test server.
public enum PackageFixture {
    /// A small tree: text, incompressible data, an executable, a nested file, a non-ASCII name,
    /// an empty folder.
    public static func tree(in directory: TemporaryDirectory) throws -> String {
        let root = directory.file("assets")
        try FileManager.default.createDirectory(atPath: root + "/img/icons", withIntermediateDirectories: true)
        try Data(String(repeating: "line of text\n", count: 5000).utf8).write(to: URL(fileURLWithPath: root + "/readme.txt"))
        try directory.writeRandom("assets/blob.bin", count: 200_000)
        try directory.writeRandom("assets/img/photo.jpg", count: 5000)
        try Data("#!/bin/sh\necho hi\n".utf8).write(to: URL(fileURLWithPath: root + "/run.sh"))
        chmod(root + "/run.sh", 0o755)
        try Data("<svg/>".utf8).write(to: URL(fileURLWithPath: root + "/img/icons/ok.svg"))
        try Data("ü".utf8).write(to: URL(fileURLWithPath: root + "/ünï.txt"))
        try FileManager.default.createDirectory(atPath: root + "/empty-dir", withIntermediateDirectories: true)
        return root
    }

    /// `paths` packed into `output` with the fixture key.
    @discardableResult
    public static func pack(
        _ paths: [String], to output: String,
        _ options: PackOptions = PackOptions(name: "assets", version: "1.0", sequence: 7, created: Timestamp(secondsSinceEpoch: 1_700_000_000))
    ) throws -> PackageBuilder.Result {
        try PackageBuilder.pack(paths, to: output, signer: Signer(key: Fixtures.signingKey()), options: options)
    }

    /// ``tree(in:)`` (plus `extra.txt` holding `extra`) packed as `assets`, version `v<sequence>`:
    /// the tree's path and the package's.
    public static func package(_ directory: TemporaryDirectory, sequence: UInt64 = 10, name: String = "p.zip", extra: String? = nil) throws -> (String, String)
    {
        let root = try tree(in: directory)
        if let extra { try Data(extra.utf8).write(to: URL(fileURLWithPath: root + "/extra.txt")) }
        let output = directory.file(name)
        try pack([root], to: output, PackOptions(name: "assets", version: "v\(sequence)", sequence: sequence))
        return (root, output)
    }

    /// A package named `ranged` of the given files, sequence `sequence`, at `path`.
    public static func rangedPackage(_ files: [String: Data], sequence: UInt64, at path: String) throws {
        let tree = try TemporaryDirectory()
        for (name, data) in files { try data.write(to: URL(fileURLWithPath: tree.file(name))) }
        try pack([tree.path], to: path, PackOptions(name: "ranged", version: "\(sequence)", sequence: sequence))
    }

    /// What trusts the fixture key.
    public static var policy: TrustPolicy { get throws { try Fixtures.trust("rsa2048-spki.der") } }

    /// Download options that trust `server`'s test CA and do not retry.
    public static func downloadOptions(_ server: HTTPSServer) throws -> DownloadOptions {
        var options = DownloadOptions()
        try options.tls.addRoots(from: server.root)
        options.retries = 0
        return options
    }
}
