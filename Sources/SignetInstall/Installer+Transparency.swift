import Foundation
import SignetCore
import SignetCrypto
import SignetNetwork
import SignetPackage

/// What a package file or URL must be to install when a transparency log is asked for
/// (`unpack --tlog-policy`, FORMAT.md §10): logged under `policy`, the largest checkpoint per
/// log kept in `stateDirectory`.
public struct TransparencyRequirement: Sendable {
    public var policy: TransparencyPolicy
    /// The folder of kept checkpoints (`tlog-HASH.checkpoint`), created 0755 when missing.
    public var stateDirectory: String
    /// How the log's tiles (and a URL's proof) are fetched: the TLS policy, limits.
    public var download: DownloadOptions

    public init(policy: TransparencyPolicy, stateDirectory: String, download: DownloadOptions = DownloadOptions()) {
        self.policy = policy
        self.stateDirectory = stateDirectory
        self.download = download
    }
}

extension Installer {
    /// Before anything of `package` is read: its proof (`PACKAGE.tlog-proof`, a file beside it
    /// or the URL with that suffix) must carry the release's entry (its `extra` line) and hold
    /// for it under the requirement; the install is then bound to that entry (name, sequence,
    /// manifest SHA-256; size and SHA-256 where the whole file is read). A package that is not
    /// the logged release is refused as not logged.
    static func requireLogged(_ package: String, options: InstallOptions, download: DownloadOptions?) throws -> InstallOptions {
        guard let requirement = options.transparency, !options.transparencyChecked else { return options }
        func refuse(_ why: String) -> SignetError {
            SignetError(.notLogged, "'\(Download.redacted(package))' is not installed: \(why). Nothing of it was read", path: Download.redacted(package))
        }
        let fetcher = BoundedFetcher(options: download ?? requirement.download, cancelled: nil)
        func read(_ location: String, limit: Int, what: String) throws -> [UInt8]? {
            if location.lowercased().hasPrefix("https://") || location.lowercased().hasPrefix("http://") {
                switch try fetcher.get(location, limit: limit, what: what) {
                case .found(let bytes): return bytes
                case .absent: return nil
                }
            }
            let path = location.lowercased().hasPrefix("file://") ? String(location.dropFirst(7)) : location
            guard FileManager.default.fileExists(atPath: path) else { return nil }
            return try InputFile.open(path, what: what, followSymlinks: false).readAll(limit: limit, what: what)
        }
        guard let bytes = try read(package + ".tlog-proof", limit: TransparencyProof.largest, what: "the package's log proof") else {
            throw refuse("it has no log proof beside it (\(Download.redacted(package)).tlog-proof)")
        }
        let proof: TransparencyProof
        let entry: ReleaseEntry
        do {
            proof = try TransparencyProof(bytes)
            guard let extra = proof.extra else { throw refuse("its log proof does not carry the release's entry (an `extra` line)") }
            entry = try ReleaseEntry(extra)
        } catch let error as SignetError where error.code != .notLogged {
            throw refuse(error.reason)
        }
        let folder = requirement.stateDirectory
        try Paths.createDirectories(folder, mode: 0o755, what: "directory")
        try TrustedInput.check(folder, what: "the transparency state folder", contents: false)
        let logURL = requirement.policy.logs.first(where: { $0.url != nil })?.url
        let verifier = TransparencyVerifier(
            policy: requirement.policy,
            storedCheckpoint: { origin in
                let path = folder + "/" + TransparencyVerifier.checkpointFileName(origin)
                guard FileManager.default.fileExists(atPath: path) else { return nil }
                return try InputFile.open(path, what: "a kept checkpoint", followSymlinks: false).readAll(
                    limit: SignedNote.largestNote, what: "a kept checkpoint")
            },
            store: { origin, note in
                try AtomicFile.write(note, to: folder + "/" + TransparencyVerifier.checkpointFileName(origin), mode: 0o644, replace: true)
            },
            tile: { path in
                guard let logURL else {
                    throw SignetError(.usage, "the policy's log line gives no URL to read its tiles from (`log VKEY URL`)")
                }
                return try read((logURL.hasSuffix("/") ? logURL : logURL + "/") + path, limit: TileTree.width * 32, what: "the log's tile \(path)")
            })
        _ = try verifier.check(proof, leaf: entry.leafHash, refuse: refuse)
        var bound = options
        bound.transparencyChecked = true
        bound.expectedPackage = PackageBinding(
            name: entry.name, version: entry.version, sequence: entry.sequence, size: entry.targetLength, sha256: entry.targetSHA256,
            manifestSHA256: entry.manifestSHA256)
        return bound
    }

    /// A binding refusal of a package held to a log entry is that it is not logged.
    static func loggedRefusal(_ error: Error, options: InstallOptions) -> Error {
        guard options.transparency != nil, let failure = error as? SignetError, failure.code == .indexMismatch else { return error }
        return SignetError(
            .notLogged, failure.reason.replacingOccurrences(of: "its signed metadata binds", with: "its transparency log entry names"), path: failure.path)
    }
}
