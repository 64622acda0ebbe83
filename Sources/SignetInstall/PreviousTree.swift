import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CSignetSystem
public import SystemPackage
import SignetCore
import SignetCrypto
import SignetManifest
import SignetReverify
import SignetPackage

/// The kept previous release, checked before it is swapped back.
struct PreviousTree {
    let manifest: Manifest
    let digest: String

    /// Its manifest must be the one pinned when it was installed; each file must have that
    /// manifest's size, SHA-256 and mode, and the tree no file the manifest does not list.
    /// Files it shares with the current release (hard links) are the ones an in-place edit
    /// would have changed: such a rollback is refused, naming them.
    static func verify(_ path: String, pinned: String?, signer: String?, destination: String) throws -> PreviousTree {
        let root = try Installer.openDirectory(path, what: "the previous release")
        let fd = root.descriptor
        guard let bytes = try InputFile.readBeneath(fd, TreeLayout.manifest, rootPath: path, what: "previous manifest", limit: 64 << 20) else {
            throw SignetError(.rollbackRefused, "the previous release '\(path)' has no manifest; it is not rolled back to", path: path)
        }
        let digest = try Digest.compute(bytes, algorithm: .sha256).hex
        guard let pinned, digest == pinned else {
            throw SignetError(
                .rollbackRefused,
                "the previous release's manifest is not the one that verified when it was installed (\(pinned == nil ? "none is recorded" : "recorded SHA-256 \(pinned!)")); it is not rolled back to",
                path: path)
        }
        let manifest = try Manifest.parse(bytes)
        var damaged: [String] = []
        for file in manifest.files {
            if damaged.count >= 5 { break }
            guard let opened = try? Paths.open(file.path, beneath: fd), let input = try? InputFile.adopt(opened, path: path + "/" + file.path, what: "file"),
                let info = try? input.descriptor.status(), info.st_mode & S_IFMT == S_IFREG
            else {
                damaged.append("\(file.path) (missing, or not a regular file)")
                continue
            }
            let shared = info.st_nlink > 1 ? ": it is shared with the installed release (a hard link)" : ""
            guard UInt64(info.st_size) == file.size else {
                damaged.append("\(file.path) (changed in place: \(info.st_size) bytes, not \(file.size)\(shared))")
                continue
            }
            guard info.st_mode & 0o7777 == mode_t(file.mode.permissions) else {
                damaged.append("\(file.path) (mode \(String(info.st_mode & 0o7777, radix: 8)), not \(String(file.mode.permissions, radix: 8))\(shared))")
                continue
            }
            let hasher = try Digest.Hasher(.sha256)
            try input.forEachChunk { hasher.update($0) }
            if !file.content.matches(try hasher.finalize()) {
                damaged.append("\(file.path) (changed in place\(shared))")
            }
        }
        if damaged.isEmpty {
            let listed = Set(manifest.files.map(\.path))
            let extra = try Reverifier.diskFiles(fd, root: path).filter { !listed.contains($0) && !$0.hasPrefix(".signet/") }
            damaged += extra.prefix(5).map { "\($0) (added)" }
        }
        if damaged.isEmpty {
            damaged = try reverified(path, root: fd, signer: signer)
        }
        guard damaged.isEmpty else {
            throw SignetError(
                .rollbackRefused,
                "the previous release \(Release(manifest).description) no longer matches its manifest: \(damaged.joined(separator: ", ")); it is not rolled back to, and '\(destination)' is unchanged. Install a release instead (unpack or update)",
                path: path)
        }
        return PreviousTree(manifest: manifest, digest: digest)
    }

    /// What `reverify` would refuse in the previous tree: with the key pinned when
    /// it was installed, the whole tree check (each file's signature attribute or the signature
    /// record, file and folder modes, anything unexpected under `.signet/`); and, always, every
    /// file and folder owned by this user and not writable by others beyond the manifest's mode.
    private static func reverified(_ path: String, root fd: FileDescriptor, signer: String?) throws -> [String] {
        var damaged: [String] = []
        let me = geteuid()
        let tree = try Reverifier.diskTree(fd, root: path)
        for relative in tree.folders.map({ $0.path + "/" }) + tree.files + (try Reverifier.signetFiles(fd, root: path)) {
            var info = stat()
            let name = relative.hasSuffix("/") ? String(relative.dropLast()) : relative
            guard fstatat(fd.rawValue, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else { continue }
            if info.st_uid != me { damaged.append("\(relative) (owned by uid \(info.st_uid), not \(me))") }
            if damaged.count >= 5 { return damaged }
        }
        guard let signer, let der = Data(base64Encoded: signer), let key = try? PublicKey(bytes: Array(der), name: "the previous release's signer") else {
            return damaged
        }
        let report = try Reverifier.verifyTree(at: path, policy: TrustPolicy(keys: [key]))
        if let failure = report.manifestFailure { damaged.append("its manifest (\(failure))") }
        for file in report.files where !file.verdict.isOK {
            guard damaged.count < 5 else { break }
            damaged.append("\(file.path) (\(file.verdict.name): \(file.detail))")
        }
        return damaged
    }
}
