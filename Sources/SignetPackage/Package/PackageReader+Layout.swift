internal import SystemPackage
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SignetCore
import SignetManifest
import SignetArchive

extension PackageReader {
    /// The entries of a package, sorted into resources and `.signet/` entries, after every check
    /// that needs no key: names, types, encryption, compression methods, duplicates, limits.
    ///
    /// Entries are kept as positions in the archive's directory (four bytes each), found by name
    /// through indexes sorted by the names' bytes: no String or hash-table slot per entry, so a
    /// package of 50,000 files costs its directory and little more.
    package struct Layout {
        /// Resource entries' positions, in archive order.
        private(set) var resourcePositions: [Int32] = []
        /// The same, sorted by name bytes, for ``resource(_:)``.
        private var resourcesByName: [Int32] = []
        /// Signature entries' positions (sorted by the path they sign once `init` is done).
        private var signaturesByName: [Int32] = []
        /// The part of a signature entry's name that is the resource's path.
        private let signatureKey: CentralDirectory.Directory.NameKey
        /// Set for every non-bare layout (its init refuses a package without them).
        var manifest: ZipReader.Entry?
        var manifestSignature: ZipReader.Entry?
        var signerCertificate: ZipReader.Entry?
        /// `.signet/signatures.sig`: the publisher's signature over the installed tree's
        /// signature record (packages made before it existed have none).
        package var recordSignature: ZipReader.Entry?
        /// The chunk-index entry (``TreeLayout/chunkIndex``), when the package has one.
        package var chunkIndex: ZipReader.Entry?
        /// `.signet/certs/*` entries by name, kept with an installed tree.
        package var certificates: [(name: String, entry: ZipReader.Entry)] = []
        let path: String
        /// The archive the positions refer to.
        private let reader: ZipReader
        private var directory: CentralDirectory.Directory { reader.directory }

        /// What the entries seen so far add up to, against the limits.
        private var directoryEntries = 0
        private var total: UInt64 = 0

        /// The resource entry named exactly `path` (byte for byte, as the manifest lists it).
        package func resource(_ path: String) -> ZipReader.Entry? {
            directory.find(path, in: resourcesByName).map { reader.entry(at: Int($0)) }
        }
        /// The signature entry of the resource `path`.
        package func signature(_ path: String) -> ZipReader.Entry? {
            directory.find(path, in: signaturesByName, key: signatureKey).map { reader.entry(at: Int($0)) }
        }
        /// The resources' paths, in archive order.
        package var resourcePaths: LazyMapSequence<[Int32], String> { resourcePositions.lazy.map { [directory] in directory.keyString(at: $0) } }
        /// The resources' paths, in byte order.
        var resourcePathsByName: LazyMapSequence<[Int32], String> { resourcesByName.lazy.map { [directory] in directory.keyString(at: $0) } }
        /// The paths of the resources that have a signature entry, in byte order.
        var signedPathsByName: LazyMapSequence<[Int32], String> {
            signaturesByName.lazy.map { [directory, signatureKey] in directory.keyString(at: $0, key: signatureKey) }
        }
        /// How many resources the archive holds.
        var resourceCount: Int { resourcePositions.count }
        /// How many resource signatures it holds.
        var signatureCount: Int { signaturesByName.count }

        /// - Parameter bare: the older layout (FORMAT.md §2): resources and `<path>.sig` beside
        ///   each, no `.signet/` at all. Signatures land in ``signature(_:)``; ``manifest`` is unset.
        package init(reader: ZipReader, limits: PackageLimits, bare: Bool = false) throws {
            path = reader.path
            self.reader = reader
            signatureKey = .init(prefix: bare ? 0 : TreeLayout.signatures.utf8.count + 1, suffix: 4)
            // Every named entry, to find a name stored twice once they are sorted; names with
            // non-ASCII characters also as Strings, which compare by canonical equivalence, so
            // that NFC/NFD twins are found as well.
            var named: [Int32] = []
            named.reserveCapacity(reader.count)
            var nonASCII = Set<String>()
            for position in 0..<reader.count {
                let entry = reader.entry(at: position)
                // A name ending in / is a directory record: installs nothing (FORMAT.md §2), but
                // counts against --max-files like any entry.
                guard let name = try checkedName(of: entry) else {
                    directoryEntries += 1
                    guard resourcePositions.count + directoryEntries <= limits.maxFiles else {
                        throw malformed("it holds more than \(limits.maxFiles) files and directory entries (--max-files)", entry: nil)
                    }
                    continue
                }
                try check(entry, name: name, limits: limits)
                named.append(Int32(position))
                if name.utf8.contains(where: { $0 >= 0x80 }), !nonASCII.insert(name).inserted {
                    throw twins(name)
                }
                try place(entry, position: Int32(position), name: name, limits: limits, bare: bare)
            }
            let directory = reader.directory
            named = directory.sortedByName(named)
            if let repeated = directory.firstRepeat(in: named) {
                let name = directory.keyString(at: repeated)
                throw malformed("the entry '\(name)' appears twice", entry: name)
            }
            // A non-ASCII name whose NFC form is another entry's name: U+212A KELVIN SIGN is "K".
            for name in nonASCII {
                let composed = name.precomposedStringWithCanonicalMapping
                if !composed.utf8.elementsEqual(name.utf8), directory.find(composed, in: named) != nil { throw twins(name) }
            }
            resourcesByName = directory.sortedByName(resourcePositions)
            signaturesByName = directory.sortedByName(signaturesByName, key: signatureKey)
            try requireSignedManifest(bare: bare)
        }

        private func malformed(_ reason: String, entry: String?) -> SignetError {
            SignetError(.malformedArchive, "package '\(path)' is malformed: \(reason)", path: path, entry: entry)
        }

        private func twins(_ name: String) -> SignetError {
            malformed("the entry '\(name)' appears twice after Unicode normalisation (two spellings of one name)", entry: name)
        }

        /// The entry's name, checked as a package path (nil for a directory record).
        private func checkedName(of entry: ZipReader.Entry) throws -> String? {
            let rawName = reader.rawName(of: entry)
            let shown = String(decoding: rawName, as: UTF8.self)
            if rawName.last == UInt8(ascii: "/") {
                guard entry.size == 0, entry.compressedSize <= 2 else {
                    throw malformed("the directory entry '\(shown)' carries data", entry: shown)
                }
                return nil
            }
            let prefix = Array((TreeLayout.directory + "/").utf8)
            let checked = rawName.starts(with: prefix) ? Array(rawName.dropFirst(prefix.count)) : Array(rawName)
            if case .failure(let refusal) = ResourcePath.validate(bytes: checked) {
                throw malformed("the entry name '\(shown)' is forbidden: \(refusal.reason)", entry: shown)
            }
            return shown
        }

        /// What every entry must be: not encrypted, stored or deflated, a regular file, and
        /// within the expansion ratio. (Names stored twice are found once all are read.)
        private func check(_ entry: ZipReader.Entry, name: String, limits: PackageLimits) throws {
            guard !entry.encrypted else { throw malformed("the entry '\(name)' is encrypted", entry: name) }
            guard entry.method == ZipReader.methodStore || entry.method == ZipReader.methodDeflate else {
                throw malformed("the entry '\(name)' uses compression method \(entry.method); only stored and deflated entries are allowed", entry: name)
            }
            if let mode = entry.unixMode, mode & 0o170000 != 0, mode & 0o170000 != 0o100000 {
                let kind = mode & 0o170000 == 0o120000 ? "a symbolic link" : "not a regular file"
                throw malformed("the entry '\(name)' is \(kind)", entry: name)
            }
            if entry.compressedSize == 0 && entry.size > 0 {
                throw malformed("the entry '\(name)' claims \(entry.size) bytes from no compressed data", entry: name)
            }
            if entry.compressedSize > 0, entry.size / entry.compressedSize > limits.maxRatio {
                throw malformed(
                    "the entry '\(name)' claims to expand \(entry.size / entry.compressedSize) times (more than \(limits.maxRatio), --max-ratio); refusing a likely deflate bomb",
                    entry: name)
            }
        }

        /// Sorts the entry into the manifest, its signature, certificates, signatures or
        /// resources, counting resources against the file and size limits.
        private mutating func place(_ entry: ZipReader.Entry, position: Int32, name: String, limits: PackageLimits, bare: Bool) throws {
            if bare {
                guard !TreeLayout.isSignetEntry(name) else {
                    throw malformed("'\(name)' is a Signet package entry; install it without --bare", entry: name)
                }
                if name.utf8.count > 4, name.utf8.suffix(4).elementsEqual(".sig".utf8) {
                    signaturesByName.append(position)
                    return
                }
            }
            switch name {
            case TreeLayout.manifest: manifest = entry
            case TreeLayout.manifestSignature: manifestSignature = entry
            case TreeLayout.signatureRecordSignature: recordSignature = entry
            case TreeLayout.chunkIndex:
                // Read by range, slice by slice: its bytes must be where they are.
                guard entry.method == ZipReader.methodStore, entry.compressedSize == entry.size else {
                    throw malformed("the entry '\(name)' is not stored", entry: name)
                }
                chunkIndex = entry
            case TreeLayout.signerCertificate:
                signerCertificate = entry
                certificates.append((name, entry))
            default:
                if let resource = TreeLayout.resource(ofSignature: name) {
                    guard case .success = ResourcePath.validate(resource) else {
                        throw malformed("the signature entry '\(name)' does not name a valid resource path", entry: name)
                    }
                    signaturesByName.append(position)
                } else if TreeLayout.chainIndex(of: name) != nil, name.hasPrefix(TreeLayout.certificates + "/") {
                    certificates.append((name, entry))
                    guard certificates.count <= PackageLimits.maximumCertificates else {
                        throw malformed("it carries more than \(PackageLimits.maximumCertificates) certificates", entry: name)
                    }
                } else if TreeLayout.isSignetEntry(name) {
                    throw malformed("unknown entry '\(name)' under .signet/", entry: name)
                } else {
                    resourcePositions.append(position)
                    let (sum, overflow) = total.addingReportingOverflow(entry.size)
                    total = sum
                    guard resourcePositions.count + directoryEntries <= limits.maxFiles else {
                        throw malformed("it holds more than \(limits.maxFiles) resources (--max-files)", entry: nil)
                    }
                    guard !overflow, total <= limits.maxTotalSize else {
                        throw malformed("its resources add up to more than \(limits.maxTotalSize) bytes (--max-total-size)", entry: name)
                    }
                }
            }
        }

        /// A bare package needs resources; any other needs a manifest and its signature.
        private func requireSignedManifest(bare: Bool) throws {
            if bare {
                guard !resourcePositions.isEmpty else { throw malformed("it holds no files", entry: nil) }
                return
            }
            guard manifest != nil else {
                throw SignetError(
                    .packageInvalid, "package '\(path)' has no .signet/manifest.json; if it is an older bare package (FILE + FILE.sig), it needs --bare",
                    path: path, entry: TreeLayout.manifest)
            }
            guard manifestSignature != nil else {
                throw SignetError(
                    .packageInvalid, "package '\(path)' has no .signet/manifest.json.sig: it is not signed", path: path, entry: TreeLayout.manifestSignature)
            }
        }

        func contents(manifest: Manifest) -> PackageContents {
            PackageContents(
                path: path, resources: .init(directory: directory, positions: resourcePositions, byName: resourcesByName),
                manifest: manifest, hasSignerCertificate: signerCertificate != nil)
        }
    }
}
