import Foundation
import Synchronization
internal import SystemPackage
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SignetCore
import SignetCrypto
import SignetManifest

// Tree checks: an installed tree's manifest first, then every listed file on both cores
// (``TreeChecker``), then what else is on disk (Reverifier+Disk.swift).
extension Reverifier {
    /// Re-verifies a tree installed by unpack: its manifest first, then every listed file
    /// (selected by `options`) on all cores, and whatever else is on disk.
    public static func verifyTree(at root: String, policy: TrustPolicy, options: ReverifyOptions = ReverifyOptions()) throws -> TreeReport {
        try verifyTree(at: root, policy: policy, options: options, cancelled: CancellationFlag())
    }

    static func verifyTree(at root: String, policy: TrustPolicy, options: ReverifyOptions, cancelled: CancellationFlag) throws -> TreeReport {
        var root = root
        while root.count > 1 && root.hasSuffix("/") { root.removeLast() }
        // Everything is read through one descriptor of the tree, so the report is about one
        // tree even while unpack swaps DIR. A swap during the check shows as DIR naming another
        // directory afterwards; the check is then made again on the tree DIR names now.
        var attempt = 0
        while true {
            attempt += 1
            let tree: OwnedDescriptor
            do { tree = try Paths.open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC) } catch {
                throw SignetError.posix(error, "cannot open the installed tree", path: root)
            }
            let fd = tree.descriptor
            // Whether DIR still names the directory this check read (a failing stat means it was
            // swapped or removed meanwhile).
            func stillNamed() -> Bool {
                guard let held = try? fd.status(), let named = try? Paths.lstat(root) else { return false }
                return held.st_dev == named.st_dev && held.st_ino == named.st_ino
            }
            let report: TreeReport
            do {
                report = try verifyTree(fd, root: root, policy: policy, options: options, cancelled: cancelled)
            } catch let error as SignetError where attempt < 3 && !stillNamed() {
                // The tree read was swapped out and is being removed (its files vanish under the
                // check): what DIR names now is checked instead of reporting the removal.
                _ = error
                continue
            }
            if stillNamed() || attempt == 3 { return report }
        }
    }

    private static func verifyTree(_ rootFD: FileDescriptor, root: String, policy: TrustPolicy, options: ReverifyOptions, cancelled: CancellationFlag) throws
        -> TreeReport
    {
        let started = DispatchTime.now()
        func elapsed() -> Double { Double(DispatchTime.now().uptimeNanoseconds - started.uptimeNanoseconds) / 1e9 }
        // What is on disk, listed and sorted on another core while this one reads, verifies and
        // parses the manifest (joined before returning: it reads through rootFD).
        let walk = OwnThreads.start {
            () throws -> (files: [String], folders: [(path: String, mode: UInt32)], unreadable: [(path: String, reason: String)], signet: [String]) in
            var found = try diskTree(rootFD, root: root)
            found.files.sort(by: ResourcePath.byteOrder)
            return (found.files, found.folders, found.unreadable, try signetFiles(rootFD, root: root))
        }
        defer { _ = walk.wait() }
        guard let manifestBytes = try InputFile.readBeneath(rootFD, TreeLayout.manifest, rootPath: root, what: "installed manifest", limit: 64 << 20),
            let manifestSignature = try InputFile.readBeneath(
                rootFD, TreeLayout.manifestSignature, rootPath: root, what: "installed manifest signature", limit: 64 * 1024)
        else {
            if isBareTree(rootFD) {
                // After the walk: it reads the same directory descriptor (whose offset a second
                // reader would share).
                let walked = try walk.wait().get().files
                if let origin = manifestOrigin(of: rootFD, files: walked) {
                    return TreeReport(
                        root: root, manifest: nil, signer: nil, manifestFailure: .relabelled,
                        manifestMessage:
                            "'\(root)' is marked as a bare tree, but its files were installed from the signed package '\(origin.name)' sequence \(origin.sequence) (their user.signet.meta says so): its manifest or manifest signature was removed. Reinstall the package",
                        files: [], attributesSupported: true, duration: elapsed())
                }
                if let (failure, message) = try options.expectationFailure(name: nil, sequence: nil, root: root) {
                    return TreeReport(
                        root: root, manifest: nil, signer: nil, manifestFailure: failure, manifestMessage: message,
                        files: [], attributesSupported: true, duration: elapsed())
                }
                var onDisk = walked
                onDisk.removeAll { $0.utf8.elementsEqual(TreeLayout.bareMarker.utf8) }
                return try verifyBareTree(
                    rootFD, root: root, onDisk: onDisk, unreadable: try walk.wait().get().unreadable,
                    policy: policy, options: options, cancelled: cancelled, elapsed: elapsed)
            }
            throw SignetError(
                .usage, "'\(root)' is not a tree installed by signet unpack (no .signet/manifest.json and .sig); give files, or the directory unpack installed",
                path: root)
        }
        let signerCertificate = try InputFile.readBeneath(rootFD, TreeLayout.signerCertificate, rootPath: root, what: "signer certificate", limit: 1 << 20)
        var chain: [[UInt8]] = []
        do {
            let certificates = try Paths.open(TreeLayout.certificates, beneath: rootFD, flags: O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            // An unreadable chain is an error, never a chain quietly dropped.
            let names = try DirectoryEntries.list(certificates.descriptor).map(\.name)
                .filter { TreeLayout.chainIndex(of: $0) != nil }
                .sorted { TreeLayout.chainIndex(of: $0)! < TreeLayout.chainIndex(of: $1)! }
            for name in names {
                if let der = try InputFile.readBeneath(rootFD, TreeLayout.certificates + "/" + name, rootPath: root, what: "certificate", limit: 1 << 20) {
                    chain.append(der)
                }
            }
        } catch let failure as SystemCallFailure where failure.code != ENOENT {
            throw SignetError.posix(failure, "cannot read the certificates of", path: root + "/" + TreeLayout.certificates)
        } catch is SystemCallFailure {
            // No certificates folder: a package signed by a bare key.
        }
        let (resolved, certificateRefusal) = policy.resolved(signerCertificate: signerCertificate, chain: chain)
        let signer = try Manifest.signer(of: manifestBytes, signature: manifestSignature, policy: resolved)
        // What unpack recorded of each file's signature, read and checked against its signature
        // on another core while this one parses the manifest (joined before returning: it opens
        // through rootFD). Where a file's attribute is still the recorded one, the content check
        // against the signed manifest is all that is needed (no RSA). A record that is missing
        // (older trees) or does not fit the manifest is not an error: every signature is then
        // verified.
        let recordRead = signer.map { key, algorithm in
            OwnThreads.start { SignatureRecord.Reader(beneath: rootFD, files: nil, key: key, algorithm: algorithm) }
        }
        defer { _ = recordRead?.wait() }
        let manifest = try Manifest.parse(manifestBytes, source: root + "/" + TreeLayout.manifest)
        guard let (key, algorithm) = signer, key.keyID == manifest.keyID, algorithm == manifest.algorithm else {
            let refusal = resolved.key(withID: manifest.keyID) == nil ? (certificateRefusal ?? policy.refusal(for: manifest.keyID)) : nil
            return TreeReport(
                root: root, manifest: nil, signer: nil, manifestFailure: refusal != nil ? .untrustedSigner : .badManifestSignature,
                manifestMessage: refusal.map {
                    "'\(root)' was installed from a package signed by key \(manifest.keyID.short), which the trust policy does not accept: \($0)"
                }
                    ?? "the installed manifest of '\(root)' does not verify: .signet/manifest.json or its signature was changed",
                files: [], attributesSupported: true, duration: elapsed())
        }
        if let refusal = resolved.tufRefusal(signer: key.keyID, manifestBytes: manifestBytes, manifest: manifest) {
            return TreeReport(
                root: root, manifest: manifest, signer: nil, manifestFailure: .untrustedSigner,
                manifestMessage: "'\(root)' holds \(refusal)", files: [], attributesSupported: true, duration: elapsed())
        }
        if let (failure, message) = try options.expectationFailure(name: manifest.name, sequence: manifest.sequence, root: root) {
            return TreeReport(
                root: root, manifest: manifest, signer: key, manifestFailure: failure, manifestMessage: message,
                files: [], attributesSupported: true, duration: elapsed())
        }
        try options.checkSelectors(against: manifest, root: root)
        try options.checkAllowedKeys(against: manifest, rootFD: rootFD, root: root)
        let record = (try? recordRead?.wait().get())?.flatMap { $0.count == manifest.files.count ? $0 : nil }
        let checker = try TreeChecker(
            root: root, descriptor: rootFD, manifest: manifest, key: key, algorithm: algorithm, repair: options.repair, record: record,
            allowedKeys: options.allowedKeys,
            peers: resolved.peerKeys(of: key.keyID, manifestBytes: manifestBytes, manifest: manifest),
            readVerityFiles: options.readVerityFiles)
        let listed = manifest.files.indices.filter { options.selects(manifest.files[$0].path) }
        let progress = ProgressCounter.make(options.progress, items: listed.count, bytes: listed.reduce(0) { $0 &+ manifest.files[$1].size })
        // A tree of fs-verity files is measured, not read: each file costs an open and the
        // kernel's read of its fs-verity descriptor, so the check waits on the disk's latency,
        // not its bandwidth or the CPU; more threads keep more of those reads in flight.
        let measured = !options.readVerityFiles && listed.contains { manifest.files[$0].verity != nil }
        let threads = measured ? max(System.activeProcessorCount, 8) : nil
        var reports = parallelMap(listed, threads: threads, worker: { TreeChecker.Workspace() }) { workspace, position -> FileReport? in
            guard !cancelled.isSet else { return nil }
            let report = checker.check(manifest.files[position], at: position, in: workspace)
            progress?.add(bytes: Int(clamping: manifest.files[position].size), items: 1)
            return report
        }.compactMap { $0 }
        progress?.finish()
        if cancelled.isSet { throw CancellationError() }
        let disk = try walk.wait().get()
        let inOrder = isInByteOrder(manifest)
        for path in unlisted(disk.files, manifest, inOrder: inOrder) where options.selects(path) && !isDeviceSeal(path, rootFD: rootFD, root: root) {
            reports.append(FileReport(path: path, verdict: .added, detail: "'\(path)' is not in the signed manifest", signatureSource: nil, signer: nil))
        }
        for (path, reason) in disk.unreadable where options.selects(path) {
            reports.append(
                FileReport(
                    path: path + "/", verdict: .unreadable,
                    detail: "\(reason); files added there cannot be seen, and each file the manifest lists there is reported on its own", signatureSource: nil,
                    signer: nil))
        }
        reports += folderReports(disk.folders, manifest: manifest, rootFD: rootFD, options: options, inOrder: inOrder)
        reports += signetReports(disk.signet, manifest: manifest, options: options)
        // In manifest order, which pack writes sorted: then only added files need sorting in.
        if !reports.indices.dropFirst().allSatisfy({ ResourcePath.byteOrder(reports[$0 - 1].path, reports[$0].path) }) {
            reports.sort { ResourcePath.byteOrder($0.path, $1.path) }
        }
        return TreeReport(
            root: root, manifest: manifest, signer: key, manifestFailure: nil, manifestMessage: nil,
            files: reports, attributesSupported: !checker.sawUnsupported.isSet, duration: elapsed())
    }

    /// A tree unpack `--bare` installed: no manifest, so no completeness guarantee; each file
    /// on disk is checked against its own signature (its attribute, else its sidecar), verified
    /// with the trust policy, and a sidecar whose file is gone is `missing`.
    private static func verifyBareTree(
        _ rootFD: FileDescriptor, root: String, onDisk: [String], unreadable: [(path: String, reason: String)], policy: TrustPolicy, options: ReverifyOptions,
        cancelled: CancellationFlag, elapsed: () -> Double
    ) throws -> TreeReport {
        guard options.allowedKeys.isEmpty else {
            throw SignetError(
                .usage,
                "'\(root)' was installed from a bare package, which has no structured files; --allow-key and allow_keys need a package made by signet pack --structured",
                path: root)
        }
        // The files the sidecars name.
        var signed: [String] = []
        var pending = [TreeLayout.signatures]
        while let folder = pending.popLast() {
            let opened: OwnedDescriptor
            do { opened = try Paths.open(folder, beneath: rootFD, flags: O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) } catch {
                if error.code == ENOENT { continue }
                throw SignetError.posix(error, "cannot read the sidecar signatures in", path: root + "/" + folder)
            }
            let fd = opened.descriptor
            do {
                for entry in try DirectoryEntries.list(fd) {
                    let relative = folder + "/" + entry.name
                    if entry.isDirectory {
                        pending.append(relative)
                    } else if let resource = TreeLayout.resource(ofSignature: relative) {
                        signed.append(resource)
                    }
                }
            } catch let failure as SystemCallFailure {
                throw SignetError.posix(failure, "cannot read the sidecar signatures in", path: root + "/" + folder)
            }
        }
        let present = Set(onDisk.map { Array($0.utf8) })
        let signedSet = Set(signed.map { Array($0.utf8) })
        let paths = (onDisk + signed.filter { !present.contains(Array($0.utf8)) }).filter(options.selects)
        for selector in options.only where !paths.contains(where: { $0 == selector || $0.hasPrefix(selector + "/") }) {
            throw SignetError(.usage, "--only '\(selector)' matches no file of '\(root)'; check the spelling (paths are relative to the tree)", path: root)
        }
        let progress = ProgressCounter.make(options.progress, items: paths.count, bytes: 0)
        var reports = parallelMap(paths) { relative -> FileReport? in
            guard !cancelled.isSet else { return nil }
            defer { progress?.add(items: 1) }
            guard present.contains(Array(relative.utf8)) else {
                return FileReport(
                    path: relative, verdict: .missing, detail: "'\(relative)' has a signature in \(TreeLayout.signatures)/ but is gone", signatureSource: nil,
                    signer: nil)
            }
            let file: InputFile
            do {
                file = try InputFile.adopt(
                    try Paths.open(relative, beneath: rootFD, flags: O_RDONLY | O_NOFOLLOW | O_CLOEXEC), path: root + "/" + relative, what: "file")
            } catch {
                let failure = SignetError.posix(error, "cannot open", path: root + "/" + relative)
                return FileReport(path: relative, verdict: .unreadable, detail: failure.reason, signatureSource: nil, signer: nil)
            }
            let report = verifyOpened(file, path: relative, policy: policy) { descriptor, meta in
                try signatureOf(descriptor, path: root + "/" + relative, meta: meta)
            }
            // No signature anywhere: the file did not come from the package.
            guard report.verdict == .unsigned, !signedSet.contains(Array(relative.utf8)) else { return report }
            return FileReport(
                path: relative, verdict: .added, detail: "'\(relative)' was not installed from the bare package (it has no signature)", signatureSource: nil,
                signer: nil)
        }.compactMap { $0 }
        if cancelled.isSet { throw CancellationError() }
        progress?.finish()
        for (path, reason) in unreadable where options.selects(path) {
            reports.append(
                FileReport(path: path + "/", verdict: .unreadable, detail: "\(reason); the files there cannot be checked", signatureSource: nil, signer: nil))
        }
        reports.sort { ResourcePath.byteOrder($0.path, $1.path) }
        let untrusted = !reports.isEmpty && reports.allSatisfy { $0.verdict == .untrusted }
        return TreeReport(
            root: root, manifest: nil, signer: nil, manifestFailure: untrusted ? .untrustedSigner : nil,
            manifestMessage: untrusted ? "'\(root)' was installed from a bare package signed by a key the trust policy does not accept" : nil,
            files: reports, attributesSupported: !reports.contains { $0.signatureSource == .sidecar }, duration: elapsed())
    }
}
