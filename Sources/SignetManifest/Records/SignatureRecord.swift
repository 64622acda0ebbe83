#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
package import SystemPackage
import SignetCore
import SignetCrypto

/// `.signet/signatures` (FORMAT.md §3): every signature unpack installed, in the order of the
/// manifest's `files`, after the one-line header `signet-signatures/2 LENGTH`. All of a
/// package's signatures are by one key, so each takes LENGTH bytes and file number i's is
/// found at a fixed offset.
///
/// It serves two purposes with one sequential file instead of a sidecar file per resource:
/// a tree check compares each file's `user.signet.sig` with it and verifies the signature (RSA)
/// only where they differ, and `--repair` restores a lost attribute from it (after verifying
/// it). The record is signed by the publisher (`.signet/signatures.sig`, made by pack; FORMAT.md
/// §3): a tree check compares attributes with it only once that signature verified over
/// the whole record; a record without it (older packages) or whose signature fails is used
/// only as a source of signatures to verify. A file's content is always checked against the
/// signed manifest, and a signature taken from the record is verified before it is restored.
package enum SignatureRecord {
    /// The longest signature a record holds (RSA-16384).
    static let maximumLength = 2048

    package static func header(length: Int) -> [UInt8] { Array("signet-signatures/2 \(length)\n".utf8) }

    /// Writes the record while the tree is staged, 64 KiB at a time.
    package final class Writer {
        private let file: OwnedDescriptor
        private var fd: FileDescriptor { file.descriptor }
        private let path: String
        let length: Int
        private var buffer: [UInt8] = []
        /// The record's bytes hashed as they are written, for `.signet/signatures.sig`.
        private let hasher: Digest.Hasher

        /// Takes ownership of `fd`, a new empty file; hashes the record with `digest`.
        package init(file: consuming OwnedDescriptor, path: String, length: Int, digest: DigestAlgorithm) throws {
            self.path = path
            self.length = length
            hasher = try Digest.Hasher(digest)
            self.file = file
            buffer.reserveCapacity(64 << 10)
            buffer += SignatureRecord.header(length: length)
        }

        /// The digest of everything written, once ``finish()`` has run.
        package private(set) var digest: Digest?

        /// Appends the next file's signature.
        package func append(_ signature: [UInt8]) throws {
            // One key signs every file of a package: another length is a bug, never written.
            guard signature.count == length else {
                throw SignetError(
                    .io, "a signature of \(signature.count) bytes does not fit the tree's signature record of \(length)-byte signatures", path: path)
            }
            buffer += signature
            if buffer.count >= 64 << 10 { try flush() }
        }

        /// Writes what is buffered and gives the file its mode (durable with the tree).
        package func finish() throws {
            try flush()
            digest = try hasher.finalize()
            do { _ = try systemCall("fchmod") { fchmod(fd.rawValue, 0o644) } } catch {
                throw SignetError.posix(error, "cannot write", path: path)
            }
        }

        private func flush() throws {
            buffer.withUnsafeBytes { hasher.update($0) }
            do { try buffer.withUnsafeBytes { try fd.write(all: $0) } } catch {
                throw SignetError.posix(error, "cannot write the staged copy of '\(TreeLayout.signatureRecord)' beside", path: path)
            }
            buffer.removeAll(keepingCapacity: true)
        }
    }

    /// A tree's record, read one signature at a time (never loaded whole).
    package final class Reader: @unchecked Sendable {
        private let file: OwnedDescriptor
        private var fd: FileDescriptor { file.descriptor }
        let length: Int
        package let count: Int
        private let start: Int

        /// Whether the record is the one the publisher signed (`.signet/signatures.sig` verifies
        /// over the whole record with the manifest's key). Only then does a tree check take a
        /// `user.signet.sig` equal to its entry as the signature unpack installed; otherwise
        /// every signature is verified (garbage written to both must not pass).
        private(set) var authenticated = false

        /// The record below `root`, if there is one with the header and one signature for
        /// each of `files` files (with `files` nil, as many as its size holds: the caller then
        /// checks ``count`` against the manifest); nil otherwise (trees installed before it
        /// existed, or a record that does not fit the manifest: every signature is then
        /// verified). With `key`, the record is read once whole, hashed and checked against its
        /// signature.
        package init?(beneath root: FileDescriptor, files: Int?, key: PublicKey? = nil, algorithm: SignatureAlgorithm = .default) {
            guard let file = try? Paths.open(TreeLayout.signatureRecord, beneath: root) else { return nil }
            let fd = file.descriptor
            var head = [UInt8](repeating: 0, count: 40)
            let read = head.withUnsafeMutableBytes { pread(fd.rawValue, $0.baseAddress, $0.count, 0) }
            guard let info = try? fd.status(), info.st_mode & S_IFMT == S_IFREG, read > 0,
                let newline = head.prefix(read).firstIndex(of: 0x0A),
                let length = Self.length(in: head[..<newline]),
                let files = files ?? Self.fitting(Int64(info.st_size) - Int64(newline + 1), length),
                case let (signatures, overflow1) = length.multipliedReportingOverflow(by: files), !overflow1,
                case let (total, overflow2) = signatures.addingReportingOverflow(newline + 1), !overflow2,
                Int64(total) == Int64(info.st_size)
            else {
                return nil
            }
            self.file = file
            self.length = length
            self.count = files
            self.start = newline + 1
            if let key { authenticated = Self.verify(fd, beneath: root, key: key, algorithm: algorithm) }
        }

        /// Whether `.signet/signatures.sig` below `root` is `key`'s signature over the record
        /// open at `fd` (read sequentially, 64 KiB at a time).
        private static func verify(_ fd: FileDescriptor, beneath root: FileDescriptor, key: PublicKey, algorithm: SignatureAlgorithm) -> Bool {
            guard let signatureFile = try? Paths.open(TreeLayout.signatureRecordSignature, beneath: root) else { return false }
            var signature = [UInt8](repeating: 0, count: key.signatureLength + 1)
            let read = signature.withUnsafeMutableBytes { (try? signatureFile.descriptor.read(fullyAt: 0, into: $0)) ?? -1 }
            guard read == key.signatureLength, let hasher = try? Digest.Hasher(algorithm.digest) else { return false }
            signature.removeLast()
            var offset: Int64 = 0
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 << 10, alignment: 16)
            defer { buffer.deallocate() }
            while true {
                let n = pread(fd.rawValue, buffer.baseAddress, buffer.count, off_t(offset))
                if n < 0 && errno == EINTR { continue }
                guard n >= 0 else { return false }
                if n == 0 { break }
                hasher.update(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
                offset += Int64(n)
            }
            guard let digest = try? hasher.finalize() else { return false }
            return Verifier.check(signature, digest: digest, key: key, algorithm: algorithm)
        }

        /// How many signatures of `length` bytes make exactly `bytes`; nil if none does.
        private static func fitting(_ bytes: Int64, _ length: Int) -> Int? {
            guard bytes >= 0, bytes % Int64(length) == 0 else { return nil }
            return Int(exactly: bytes / Int64(length))
        }

        /// LENGTH from `signet-signatures/2 LENGTH`.
        private static func length(in line: ArraySlice<UInt8>) -> Int? {
            let prefix = Array("signet-signatures/2 ".utf8)
            guard line.starts(with: prefix), let length = Int(String(decoding: line.dropFirst(prefix.count), as: UTF8.self)),
                (1...maximumLength).contains(length)
            else { return nil }
            return length
        }

        /// The signature recorded for file number `index`; nil if it cannot be read.
        package func signature(at index: Int) -> [UInt8]? {
            guard index >= 0, index < count else { return nil }
            var done = -1
            let bytes = [UInt8](unsafeUninitializedCapacity: length) { buffer, count in
                done = (try? fd.read(fullyAt: Int64(start + index * length), into: UnsafeMutableRawBufferPointer(buffer))) ?? -1
                count = max(0, done)
            }
            return done == length ? bytes : nil
        }

        /// Whether `candidate` is the signature recorded for file number `index`, read through
        /// `window` (one pread per `Window.signatures` neighbouring files, not one per file).
        package func matches(_ candidate: [UInt8], at index: Int, through window: Window) -> Bool {
            guard authenticated, candidate.count == length, index >= 0, index < count else { return false }
            if !(window.first..<window.first + window.filled).contains(index) {
                window.first = index
                let wanted = min(Window.signatures, count - index) * length
                if window.bytes.count < wanted { window.bytes = [UInt8](repeating: 0, count: wanted) }
                let done = window.bytes.withUnsafeMutableBytes {
                    (try? fd.read(fullyAt: Int64(start + index * length), into: UnsafeMutableRawBufferPointer(rebasing: $0[0..<wanted]))) ?? -1
                }
                window.filled = done == wanted ? wanted / length : 0
                guard window.filled > 0 else { return false }
            }
            let offset = (index - window.first) * length
            return window.bytes.withUnsafeBytes { recorded in
                candidate.withUnsafeBytes { memcmp(recorded.baseAddress! + offset, $0.baseAddress!, length) == 0 }
            }
        }

        /// A run of neighbouring signatures one worker keeps for one reader (workers take files
        /// in manifest order, so most files' signatures are already in the window).
        package final class Window {
            static let signatures = 256
            fileprivate var bytes: [UInt8] = []
            fileprivate var first = 0
            fileprivate var filled = 0
            package init() {}
        }

    }
}
