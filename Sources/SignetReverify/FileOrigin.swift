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

/// Where an installed file came from, from its attributes (informational: ``Reverifier``
/// decides whether it verifies).
public struct FileOrigin: Sendable {
    /// The file.
    public let path: String
    /// True when the file carries `user.signet.sig` or `user.signet.meta`, or the installed
    /// tree around it keeps its signature (filesystems without user attributes, bare trees).
    public let isInstalled: Bool
    /// True when the installed tree around it holds a sidecar signature for it.
    public let hasSidecar: Bool
    /// The package name, sequence, claimed key and path in the package, from `user.signet.meta`
    /// (or, without it, from the installed tree's manifest).
    public private(set) var packageName: String?
    /// The package version, from the installed tree's manifest when the file is inside one.
    public let version: String?
    /// The package sequence: the installed tree's, when the file is inside one whose manifest
    /// lists it, else the one `user.signet.meta` records (the release that wrote the file).
    public private(set) var sequence: UInt64?
    /// The key the metadata names.
    public private(set) var keyID: KeyID?
    /// The file's path inside the package.
    public private(set) var packagePath: String?
    /// The URL the package (or the file, for `fetch`) was downloaded from, when Signet
    /// downloaded it; informational, like the rest of `user.signet.meta`.
    public let source: String?

    /// Reads the attributes through one descriptor opened with O_NOFOLLOW.
    ///
    /// - Throws: ``/SignetCore/SignetError`` when the file cannot be opened or its attributes or its tree's
    ///   manifest cannot be read (a filesystem without user attributes is not an error: the
    ///   file is then simply not installed by Signet).
    public init(path: String) throws {
        self.path = path
        let file = try InputFile.open(path, what: "file", followSymlinks: false)
        let meta = SignetMetadata(file.descriptor)
        var signature = false
        switch ExtendedAttributes.get(ExtendedAttributes.signature, on: file.descriptor) {
        case .success(let value): signature = !(value ?? []).isEmpty
        case .failure(let failure) where failure.isUnsupported: break
        case .failure(let failure): throw failure.error("read", attribute: ExtendedAttributes.signature, path: path)
        }
        packageName = meta?.name
        sequence = meta?.sequence
        keyID = meta?.keyID
        packagePath = meta?.path
        source = meta?.source
        guard let (root, relative) = Reverifier.installedTree(containing: path) else {
            isInstalled = signature || meta != nil
            hasSidecar = false
            version = nil
            return
        }
        let sidecar = ((try? Reverifier.treeCopy(root: root, relative: relative)) ?? nil) != nil
        hasSidecar = sidecar
        // Informational: a manifest that does not parse names no version (a bare tree has none).
        let manifest = (try? readSmallFile(root + "/" + TreeLayout.manifest, what: "installed manifest", limit: 64 << 20)).flatMap { try? Manifest.parse($0) }
        version = manifest?.version
        // On a filesystem without user attributes the tree's manifest and sidecar say where
        // the file came from (as informational as the attribute would be).
        if meta == nil, sidecar, let manifest, let entry = manifest.files.first(where: { $0.path == relative }) {
            isInstalled = true
            packageName = manifest.name
            sequence = manifest.sequence
            keyID = manifest.keyID
            packagePath = entry.path
        } else {
            isInstalled = signature || meta != nil || sidecar
            // A file a later release left unchanged is shared with it (a hard link)
            // and its attribute keeps the sequence of the release that wrote it: the tree's
            // manifest says which release it belongs to now.
            if let manifest, meta?.name == manifest.name, manifest.files.contains(where: { $0.path == relative }) {
                sequence = manifest.sequence
            }
        }
    }
}
