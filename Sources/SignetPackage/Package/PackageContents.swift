#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SignetManifest
import SignetArchive

/// A package's contents as read from the archive, checked for structure but not for trust.
public struct PackageContents: Sendable {
    /// One resource entry.
    public struct Resource: Sendable, Equatable {
        /// Its path.
        public let path: String
        /// Uncompressed size claimed by the archive.
        public let size: UInt64
        /// Compressed size.
        public let compressedSize: UInt64
        /// How the archive keeps it.
        public let compression: StorageMethod
    }

    /// The resource entries in archive order. Each is read from the archive's directory when
    /// it is used, so a package of many files costs its directory, not a copy of every name.
    public struct Resources: RandomAccessCollection, Sendable {
        let directory: CentralDirectory.Directory
        let positions: [Int32]
        /// The positions sorted by name bytes, for ``named(_:)``.
        let byName: [Int32]

        /// The first index.
        public var startIndex: Int { positions.startIndex }
        /// One past the last index.
        public var endIndex: Int { positions.endIndex }
        /// The resource at `index` in archive order.
        public subscript(index: Int) -> Resource { resource(at: positions[index]) }

        /// The resource whose path is exactly `path` (byte for byte), if the archive holds it.
        public func named(_ path: String) -> Resource? {
            directory.find(path, in: byName).map(resource(at:))
        }

        private func resource(at position: Int32) -> Resource {
            let record = directory[Int(position)]
            return Resource(
                path: directory.keyString(at: position), size: record.size, compressedSize: record.compressedSize,
                compression: record.method == ZipReader.methodStore ? .stored : .deflated)
        }
    }

    /// The package file.
    public let path: String
    /// Resources in archive order.
    public let resources: Resources
    /// The manifest, parsed. Not trustworthy until ``PackageReader/verify(_:policy:limits:now:progress:)-(String,_,_,_,_)`` says so.
    public let manifest: Manifest
    /// Whether the package carries a signer certificate.
    public let hasSignerCertificate: Bool
}
