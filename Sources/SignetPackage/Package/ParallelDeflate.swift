#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import SystemPackage
import SignetCore
import SignetCrypto
import SignetArchive

/// Compresses the deflated resources of a package on all cores before the package is written.
///
/// Files are spread over one worker per core (largest first, each to the least loaded worker).
/// Each worker writes its files into a private temporary zip beside the output; libzip reads
/// each file once, through the same hashing source the package uses, so the digests are in the
/// ledger when the package needs them. zlib is deterministic: the package is byte-identical to one
/// compressed on a single thread.
final class ParallelDeflate {
    private var paths: [String] = []
    private var tokens: [Int] = []
    private var archives: [InputFile] = []
    /// Where each input's deflate stream is, if it was compressed here (32 bytes per input).
    private var placement: [Placement?] = []

    private struct Placement {
        let worker: UInt16
        let crc: UInt32
        let localHeaderOffset: UInt64
        let compressedSize: UInt64
    }

    private let ledger: PackLedger

    init(ledger: PackLedger, methods: [ZipCompression], besides output: String, workers: Int = System.activeProcessorCount) throws {
        self.ledger = ledger
        let inputs = ledger.inputs
        let deflated = inputs.indices.filter { methods[$0] != .store }
        let count = min(workers, deflated.count, Int(UInt16.max))
        guard count >= 2, inputs.count <= Int(UInt32.max) else { return }
        var shares = [[Int]](repeating: [], count: count)
        var loads = [UInt64](repeating: 0, count: count)
        for index in deflated.sorted(by: { inputs[$0].size > inputs[$1].size }) {
            let lightest = loads.indices.min { loads[$0] < loads[$1] }!
            shares[lightest].append(index)
            loads[lightest] += inputs[index].size + 4096
        }
        for _ in 0..<count {
            let path = TemporaryFiles.name(besides: output, tag: "deflate")
            tokens.append(TemporaryFiles.register(path))
            do {
                // Made (and registered) here; each job opens it again for libzip.
                _ = try TemporaryFiles.guardedOpen(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
            } catch let failure as SystemCallFailure {
                remove()
                throw SignetError.posix(failure, "cannot create a temporary file beside", path: output)
            }
            paths.append(path)
        }
        let jobs = (0..<count).map { Job(path: paths[$0], ledger: ledger, files: shares[$0].map { ($0, methods[$0]) }) }
        let results = parallelMap(jobs) { job in Result { try job.run() } }
        do {
            for result in results { try result.get() }
            placement = Array(repeating: nil, count: inputs.count)
            for (worker, share) in shares.enumerated() {
                // Signet wrote these archives itself a moment ago: read their directories
                // directly rather than keep a libzip reader (and a zip_source_zip) per entry.
                let archive = try InputFile.open(paths[worker], what: "temporary archive")
                let records = try CentralDirectory.records(of: archive, archive: paths[worker])
                guard records.count == share.count else {
                    throw SignetError(.io, "the temporary archive '\(paths[worker])' holds \(records.count) entries, not \(share.count)", path: paths[worker])
                }
                for (record, index) in zip(records, share) {
                    guard records.name(of: record).elementsEqual(String(index).utf8), record.method == CentralDirectory.deflateMethod,
                        record.size == inputs[index].size
                    else {
                        throw SignetError(.io, "the temporary archive '\(paths[worker])' does not hold what was written to it", path: paths[worker])
                    }
                    placement[index] = Placement(
                        worker: UInt16(worker), crc: record.crc, localHeaderOffset: record.localHeaderOffset,
                        compressedSize: record.compressedSize)
                }
                archives.append(archive)
            }
        } catch {
            remove()
            throw error
        }
    }

    /// The deflate stream of input `index`, if it was compressed here.
    func source(for index: Int) -> ZipEntrySource? {
        guard index < placement.count, let place = placement[index] else { return nil }
        return CopiedDeflateSource(
            file: archives[Int(place.worker)], localHeaderOffset: place.localHeaderOffset,
            compressedSize: place.compressedSize, crc: place.crc, size: ledger.inputs[index].size)
    }

    /// Deletes the temporary archives (the open descriptors stay readable until released).
    func remove() {
        for path in paths { unlink(path) }
        for token in tokens { TemporaryFiles.unregister(token) }
        tokens.removeAll()
    }

    /// One worker: its files, compressed into one temporary archive.
    private final class Job: @unchecked Sendable {
        // Each input index belongs to exactly one job; its source is made and read on that job's thread.
        let path: String
        let ledger: PackLedger
        let files: [(index: Int, method: ZipCompression)]

        init(path: String, ledger: PackLedger, files: [(index: Int, method: ZipCompression)]) {
            self.path = path
            self.ledger = ledger
            self.files = files
        }

        func run() throws {
            // Through a descriptor of the file made (and registered) for it: libzip writing to a
            // path would make a temporary file of its own that an interruption cannot know.
            let opened: OwnedDescriptor
            do { opened = try Paths.open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC) } catch {
                throw SignetError.posix(error, "cannot open the temporary archive", path: path)
            }
            let writer = try ZipWriter(writingTo: ArchiveOutput(file: opened, path: path))
            for (index, method) in files {
                try writer.add(String(index), source: ResourceSource(ledger, index: index), compression: method, permissions: 0o644)
            }
            try writer.close()
        }
    }
}
