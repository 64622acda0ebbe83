import Foundation
import Synchronization
package import SystemPackage
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SignetCore
import SignetCrypto
import SignetManifest

// What is on disk below an installed tree, walked through its descriptor, and the verdicts on
// what the manifest does not list: added files and folders, files under `.signet/`.
extension Reverifier {
    /// The paths of `onDisk` (sorted by their bytes) that `manifest` does not list, compared
    /// byte for byte (what the filesystem compares): one merge when the manifest is in byte
    /// order too (as pack writes it), else a set of the manifest's paths.
    /// Whether `path` is a seal the device wrote at the top of the tree (`signet trust seal`
    /// on an installed trust directory): a regular `.signet-trust` holding a signet-trust/1
    /// document. It is the device's, not the package's, and not reported as added.
    static func isDeviceSeal(_ path: String, rootFD: FileDescriptor, root: String) -> Bool {
        guard path.utf8.elementsEqual(TrustStoreSeal.fileName.utf8),
            let bytes = try? InputFile.readBeneath(rootFD, path, rootPath: root, what: "trust seal", limit: 16 << 20)
        else { return false }
        return TrustStoreSeal.parse(bytes) != nil
    }

    /// Whether the manifest's paths are in byte order (as pack writes them): one pass, done once
    /// per tree check and handed to ``unlisted(_:_:inOrder:)`` and ``folderReports``.
    static func isInByteOrder(_ manifest: Manifest) -> Bool {
        let files = manifest.files
        return files.indices.dropFirst().allSatisfy { ResourcePath.byteOrder(files[$0 - 1].path, files[$0].path) }
    }

    package static func unlisted(_ onDisk: [String], _ manifest: Manifest, inOrder: Bool? = nil) -> [String] {
        let files = manifest.files
        let sorted = inOrder ?? isInByteOrder(manifest)
        guard sorted else {
            let known = Set(files.map { Array($0.path.utf8) })
            return onDisk.filter { !known.contains(Array($0.utf8)) }
        }
        var extra: [String] = []
        var listed = 0
        for path in onDisk {
            var order = 1
            while listed < files.count {
                order = ResourcePath.byteComparison(files[listed].path, path)
                if order >= 0 { break }
                listed += 1
            }
            if listed < files.count, order == 0 {
                listed += 1
            } else {
                extra.append(path)
            }
        }
        return extra
    }

    /// Every non-directory below the tree, relative, outside `.signet/`; links are listed, not
    /// followed. One folder at a time, each opened below the tree's descriptor (never through a
    /// link), without recursion: neither depth nor path length is limited.
    package static func diskFiles(_ rootFD: FileDescriptor, root: String) throws -> [String] {
        try diskTree(rootFD, root: root).files
    }

    /// ``diskFiles(_:root:)``, every folder below the tree (outside `.signet/`) with its
    /// permission bits, as read through the descriptor the walk opened it with, and the folders
    /// below the root that could not be opened or listed (with why): the walk goes on without
    /// them, and the tree check reports each as `unreadable` (the files the manifest lists there
    /// get their own `unreadable` verdict). Only the root itself failing is an error.
    package static func diskTree(_ rootFD: FileDescriptor, root: String) throws -> (
        files: [String], folders: [(path: String, mode: UInt32)], unreadable: [(path: String, reason: String)]
    ) {
        var found: [String] = []
        var folders: [(path: String, mode: UInt32)] = []
        var unreadable: [(path: String, reason: String)] = []
        var pending: [String] = [""]
        // Lists one folder (open at `fd`) into `found` and `pending`.
        func list(_ fd: FileDescriptor, prefix: String, directory: String) throws {
            do {
                try DirectoryEntries.forEach(in: fd) { entry in
                    let name = entry.name
                    if prefix.isEmpty && name == TreeLayout.directory { return }
                    let relative = prefix.isEmpty ? name : prefix + "/" + name
                    // The directory entry says what it is on most filesystems; fstatat only when it does not.
                    var isDirectory = entry.isDirectory
                    if entry.typeUnknown {
                        var info = stat()
                        _ = try systemCall("fstatat") { fstatat(fd.rawValue, entry.rawName, &info, AT_SYMLINK_NOFOLLOW) }
                        isDirectory = info.st_mode & S_IFMT == S_IFDIR
                    }
                    if isDirectory { pending.append(relative) } else { found.append(relative) }
                }
            } catch let failure as SystemCallFailure {
                guard !prefix.isEmpty else { throw SignetError.posix(failure, "cannot read directory", path: directory) }
                unreadable.append((prefix, SignetError.posix(failure, "cannot read directory", path: directory).reason))
            }
        }
        while let prefix = pending.popLast() {
            let directory = prefix.isEmpty ? root : root + "/" + prefix
            guard !prefix.isEmpty else {
                try list(rootFD, prefix: prefix, directory: directory)
                continue
            }
            let opened: OwnedDescriptor
            do { opened = try Paths.open(prefix, beneath: rootFD, flags: O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) } catch {
                // Removed since it was listed: its files are missing, nothing to walk.
                if error.code == ENOENT { continue }
                unreadable.append((prefix, SignetError.posix(error, "cannot read directory", path: directory).reason))
                continue
            }
            if let info = try? opened.descriptor.status() { folders.append((prefix, UInt32(info.st_mode) & 0o7777)) }
            try list(opened.descriptor, prefix: prefix, directory: directory)
        }
        return (found, folders, unreadable)
    }

    /// Folders on disk: one that holds no file of the manifest is `added` (an empty folder, or
    /// one holding only added files); one whose mode is not 0755 is `mode-changed` (restored by
    /// `--repair`, once the manifest has verified).
    package static func folderReports(
        _ folders: [(path: String, mode: UInt32)], manifest: Manifest, rootFD: FileDescriptor, options: ReverifyOptions,
        inOrder known: Bool? = nil
    ) -> [FileReport] {
        let files = manifest.files
        // Whether the manifest lists a file below `folder`: in a manifest in byte order (what
        // pack writes) the paths starting with "folder/" are one run, found by binary search
        // (no set of 50,000 paths per check); otherwise a set of every signed folder.
        let inOrder = known ?? isInByteOrder(manifest)
        var signed = Set<[UInt8]>()
        if !inOrder {
            for file in files {
                var path = Array(file.path.utf8)
                while let slash = path.lastIndex(of: UInt8(ascii: "/")) {
                    path.removeSubrange(slash...)
                    guard signed.insert(path).inserted else { break }
                }
            }
        }
        func holdsSignedFile(_ folder: String) -> Bool {
            guard inOrder else { return signed.contains(Array(folder.utf8)) }
            let prefix = folder + "/"
            var low = 0, high = files.count
            while low < high {
                let middle = low + (high - low) / 2
                if ResourcePath.byteComparison(files[middle].path, prefix) < 0 { low = middle + 1 } else { high = middle }
            }
            return low < files.count && files[low].path.utf8.starts(with: prefix.utf8)
        }
        var reports: [FileReport] = []
        // A folder where the manifest lists a file is that file's report (`modified`); the set
        // of file paths is made only when a folder holds no signed file (rare).
        var listedFiles: Set<[UInt8]>? = nil
        for (path, mode) in folders where options.selects(path) {
            guard holdsSignedFile(path) else {
                if listedFiles == nil { listedFiles = Set(manifest.files.map { Array($0.path.utf8) }) }
                if listedFiles!.contains(Array(path.utf8)) { continue }
                reports.append(
                    FileReport(
                        path: path + "/", verdict: .added, detail: "'\(path)/' is a folder the signed manifest does not have", signatureSource: nil, signer: nil
                    ))
                continue
            }
            guard mode != 0o755 else { continue }
            let found = String(mode, radix: 8)
            if options.repair, let folder = try? Paths.open(path, beneath: rootFD, flags: O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) {
                if fchmod(folder.descriptor.rawValue, 0o755) == 0 {
                    reports.append(
                        FileReport(
                            path: path + "/", verdict: .repaired, detail: "'\(path)/' had mode \(found); restored to 0755", signatureSource: nil, signer: nil))
                    continue
                }
            }
            reports.append(
                FileReport(
                    path: path + "/", verdict: .modeChanged,
                    detail: "'\(path)/' has mode \(found), not 0755 (every installed folder is 0755); --repair restores it", signatureSource: nil, signer: nil))
        }
        return reports
    }

    /// The files below `DIR/.signet/`, relative to DIR ("" when it has none).
    package static func signetFiles(_ rootFD: FileDescriptor, root: String) throws -> [String] {
        guard let opened = try? Paths.open(TreeLayout.directory, beneath: rootFD, flags: O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) else { return [] }
        return try diskTree(opened.descriptor, root: root + "/" + TreeLayout.directory).files.map { TreeLayout.directory + "/" + $0 }
    }

    /// Files under `DIR/.signet/` that an install does not write: `added` (a tree check must not
    /// have a folder where anything can be put unnoticed).
    static func signetReports(_ files: [String], manifest: Manifest, options: ReverifyOptions) -> [FileReport] {
        guard !files.isEmpty, options.only.isEmpty else { return [] }
        let fixed: Set<[UInt8]> = Set(
            [TreeLayout.manifest, TreeLayout.manifestSignature, TreeLayout.signatureRecord, TreeLayout.signatureRecordSignature, TreeLayout.signerCertificate]
                .map { Array($0.utf8) })
        let others = files.filter { !fixed.contains(Array($0.utf8)) && TreeLayout.chainIndex(of: $0) == nil }
        // Sidecars and structured copies are looked up only when there are any (an xattr tree
        // has none): no set of every manifest path per check.
        guard !others.isEmpty else { return [] }
        var expected = Set<[UInt8]>()
        for file in manifest.files {
            expected.insert(Array(TreeLayout.signature(of: file.path).utf8))
            if file.structured != nil { expected.insert(Array(TreeLayout.structuredCopy(of: file.path).utf8)) }
        }
        return others.filter { !expected.contains(Array($0.utf8)) }.map {
            FileReport(path: $0, verdict: .added, detail: "'\($0)' is not a file an install writes under .signet/", signatureSource: nil, signer: nil)
        }
    }
}
